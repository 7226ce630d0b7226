package status

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// routeFailed marks a failed node entry; upstream's aggregate looks for it anywhere in a
// message (types.APBRouteErrorMsg).
const routeFailed = "failed to apply policy"

// routeEntry is upstream's per-node message: the gateways sorted as strings (sets.List), or
// the failure with the node named twice.
func routeEntry(node string, out nodeOutcome) string {
	if out.failure != "" {
		return fmt.Sprintf("%s: %s %s: %s", node, node, routeFailed, out.failure)
	}
	ips := slices.Clone(out.gateways)
	slices.Sort(ips)
	return fmt.Sprintf("%s: configured external gateway IPs: %s", node, strings.Join(slices.Compact(ips), ","))
}

// routes are the AdminPolicyBasedExternalRoutes whose status differs from what the reports
// say: Fail as soon as one node failed, Success once every node programmed the policy, unset
// until then; lastTransitionTime is when the controller last changed it.
func (a *Aggregator) routes(v *view) []statusWrite {
	policies, _ := a.Snapshot.ExternalRoutes.List(labels.Everything())
	var out []statusWrite
	for _, p := range policies {
		o := dataplane.Origin{Kind: cluster.KindExternalRoute, Name: p.Name}
		tk := a.since(o, p.UID, p.Generation, p.ResourceVersion)
		failed, applied, entries := v.verdict(o, tk, byNode(p.Status.Messages), routeEntry)
		status, messages := aggregateOf(tk, failed, applied, string(p.Status.Status), string(ovnv1.SuccessStatus), string(ovnv1.FailStatus)), texts(entries)
		if status == string(p.Status.Status) && sameSet(messages, p.Status.Messages) {
			continue
		}
		out = append(out, statusWrite{key: o, object: "AdminPolicyBasedExternalRoute " + p.Name, rv: p.ResourceVersion,
			status: map[string]any{"status": orNullString(status), "messages": orNull(messages), "lastTransitionTime": metav1.Now()},
			write:  statusPatch(a.Client.K8sOVNV1().AdminPolicyBasedExternalRoutes().Patch, p.Name)})
	}
	return out
}
