package status

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// Upstream's EgressQoS status strings (SEMANTICS.md section 2.3).
const (
	qosApplied    = "EgressQoS Rules applied"
	qosNotApplied = "EgressQoS Rules not correctly applied"
	qosZonePrefix = "Ready-In-Zone-"
	reasonSuccess = "SetupSucceeded"
	reasonFailed  = "SetupFailed"
)

// qosMessage is the message of a node's condition Ready-In-Zone-<node>.
func qosMessage(_ string, out nodeOutcome) string {
	if out.failure != "" {
		return qosNotApplied + ": " + out.failure
	}
	return qosApplied
}

// qoses are the EgressQoSes whose status differs from what the reports say: the aggregate and
// a condition Ready-In-Zone-<node> per node, whose lastTransitionTime moves only when its
// status flips.
func (a *Aggregator) qoses(v *view) []statusWrite {
	qs, _ := a.Snapshot.EgressQoSes.List(labels.Everything())
	var out []statusWrite
	for _, q := range qs {
		o := dataplane.Origin{Kind: cluster.KindEgressQoS, Namespace: q.Namespace, Name: q.Name}
		current := map[string]metav1.Condition{}
		messages := map[string]string{}
		for _, c := range q.Status.Conditions {
			if node, ok := strings.CutPrefix(c.Type, qosZonePrefix); ok {
				current[node], messages[node] = c, c.Message
			}
		}
		tk := a.since(o, q.UID, q.Generation, q.ResourceVersion)
		failed, applied, entries := v.verdict(o, tk, func(node string) string { return messages[node] }, qosMessage)
		status := aggregateOf(tk, failed, applied, q.Status.Status, qosApplied, qosNotApplied)
		var conds []metav1.Condition
		same := status == q.Status.Status && len(entries) == len(q.Status.Conditions)
		for _, e := range entries {
			c := metav1.Condition{Type: qosZonePrefix + e.node, Status: metav1.ConditionTrue, Reason: reasonSuccess, Message: e.text}
			if strings.HasPrefix(c.Message, qosNotApplied) {
				c.Status, c.Reason = metav1.ConditionFalse, reasonFailed
			}
			c.LastTransitionTime = metav1.Now()
			if was, ok := current[e.node]; ok && was.Status == c.Status {
				c.LastTransitionTime = was.LastTransitionTime // only a flip moves it
			}
			was, ok := current[e.node]
			same = same && ok && was.Status == c.Status && was.Reason == c.Reason && was.Message == c.Message
			conds = append(conds, c)
		}
		if same {
			continue
		}
		out = append(out, statusWrite{key: o, object: "EgressQoS " + q.Namespace + "/" + q.Name, rv: q.ResourceVersion,
			status: map[string]any{"status": orNullString(status), "conditions": orNull(conds)},
			write:  statusPatch(a.Client.K8sOVNV1().EgressQoSes(q.Namespace).Patch, q.Name)})
	}
	return out
}
