package status

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"

	ovnac "github.com/egressd/egressd/api/generated/applyconfiguration/k8sovn/v1"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
)

// routeFailed marks a failed node entry; upstream's aggregate looks for it anywhere in a
// message (types.APBRouteErrorMsg).
const routeFailed = "failed to apply policy"

// routeMessage is upstream's per-node message: the gateways sorted as strings (sets.List),
// or the failure with the node named twice.
func routeMessage(node string, gateways []netip.Addr, failure error) string {
	if failure != nil {
		return fmt.Sprintf("%s: %s %s: %v", node, node, routeFailed, failure)
	}
	ips := make([]string, len(gateways))
	for i, g := range gateways {
		ips[i] = g.String()
	}
	slices.Sort(ips)
	return fmt.Sprintf("%s: configured external gateway IPs: %s", node, strings.Join(slices.Compact(ips), ","))
}

// writeRouteEntry writes this node's message into status.messages with its lastTransitionTime,
// only when the message changed, so that the time says when this node's outcome last changed.
func writeRouteEntry(ctx context.Context, w *Writer, o dataplane.Origin, failure error, _ string) (bool, error) {
	r, err := w.Snapshot.ExternalRoutes.Get(o.Name)
	if err != nil {
		return false, nil // deleted since, or a legacy annotation's origin: nothing to report on
	}
	var gateways []netip.Addr
	if failure == nil {
		if gateways, err = w.RouteGateways(w.Snapshot, o.Name); err != nil {
			return false, nil // changed since the sync: the next one reports it
		}
	}
	msg := routeMessage(w.Node, gateways, failure)
	if slices.Contains(r.Status.Messages, msg) {
		return false, nil
	}
	ac := ovnac.AdminPolicyBasedExternalRoute(o.Name).WithStatus(ovnac.AdminPolicyBasedRouteStatus().
		WithMessages(msg).WithLastTransitionTime(metav1.Now()))
	_, err = w.Client.K8sOVNV1().AdminPolicyBasedExternalRoutes().ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: w.Node, Force: true})
	return true, err
}

// routeVerdicts turns the nodes' messages into "<node>: Success|Fail" for aggregate.
func routeVerdicts(messages []string) []string {
	out := make([]string, 0, len(messages))
	for _, m := range messages {
		node, text, ok := strings.Cut(m, ": ")
		if !ok {
			continue
		}
		verdict := ovnv1.SuccessStatus
		if strings.Contains(text, routeFailed) {
			verdict = ovnv1.FailStatus
		}
		out = append(out, node+": "+string(verdict))
	}
	return out
}

// reconcileRoutes writes status.status of every AdminPolicyBasedExternalRoute: Fail as soon as
// one node failed, Success once every node reported, unset until then.
func (a *Aggregator) reconcileRoutes(ctx context.Context, nodes sets.Set[string]) {
	routes, _ := a.Snapshot.ExternalRoutes.List(labels.Everything())
	for _, r := range routes {
		apply := func(st *ovnac.AdminPolicyBasedRouteStatusApplyConfiguration, manager string) error {
			_, err := a.Client.K8sOVNV1().AdminPolicyBasedExternalRoutes().ApplyStatus(ctx, ovnac.AdminPolicyBasedExternalRoute(r.Name).WithStatus(st),
				metav1.ApplyOptions{FieldManager: manager, Force: true})
			return err
		}
		a.settle("AdminPolicyBasedExternalRoute "+r.Name, routeVerdicts(r.Status.Messages), string(r.Status.Status), nodes,
			string(ovnv1.SuccessStatus), string(ovnv1.FailStatus),
			func(manager string) error { return apply(ovnac.AdminPolicyBasedRouteStatus(), manager) },
			func(status string) error {
				return apply(ovnac.AdminPolicyBasedRouteStatus().WithStatus(ovnv1.StatusType(status)), leaderManager)
			})
	}
}
