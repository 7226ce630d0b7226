package status

import (
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// Upstream's EgressFirewall status strings (SEMANTICS.md section 1.4).
const (
	fwApplied    = "EgressFirewall Rules applied"
	fwNotApplied = "EgressFirewall Rules not correctly applied"
)

// firewallEntry is a node's entry as upstream's zones write it: "<node>: EgressFirewall Rules
// applied", a note after "; " (the aggregate reads the entry as applied still, as it is), or
// the failure.
func firewallEntry(node string, out nodeOutcome) string {
	switch {
	case out.failure != "":
		return node + ": " + fwNotApplied + ": " + out.failure
	case out.note != "":
		return node + ": " + fwApplied + "; " + out.note
	}
	return node + ": " + fwApplied
}

// firewalls are the EgressFirewalls whose status differs from what the reports say.
func (a *Aggregator) firewalls(v *view) []statusWrite {
	efs, _ := a.Snapshot.EgressFirewalls.List(labels.Everything())
	var out []statusWrite
	for _, ef := range efs {
		o := dataplane.Origin{Kind: cluster.KindEgressFirewall, Namespace: ef.Namespace, Name: ef.Name}
		tk := a.since(o, ef.UID, ef.Generation, ef.ResourceVersion)
		failed, applied, entries := v.verdict(o, tk, byNode(ef.Status.Messages), firewallEntry)
		status, messages := aggregateOf(tk, failed, applied, ef.Status.Status, fwApplied, fwNotApplied), texts(entries)
		if status == ef.Status.Status && sameSet(messages, ef.Status.Messages) {
			continue
		}
		out = append(out, statusWrite{key: o, object: "EgressFirewall " + ef.Namespace + "/" + ef.Name, rv: ef.ResourceVersion,
			status: map[string]any{"status": orNullString(status), "messages": orNull(messages)},
			write:  statusPatch(a.Client.K8sOVNV1().EgressFirewalls(ef.Namespace).Patch, ef.Name)})
	}
	return out
}
