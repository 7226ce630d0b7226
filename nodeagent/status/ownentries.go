package status

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// OwnEntries returns a trim for an agent's cache of the egress API objects: of the status
// that every node writes an entry into (EgressFirewall, EgressQoS, external-route policy) it
// keeps node's entry alone, which is all the agent's writer reads of it. Each such object
// holds one entry per node: cached whole, every agent of an N-node cluster would hold N
// entries of every object, and every other agent's write would reach it as a change.
func OwnEntries(node string) func(obj any) {
	prefix := node + ": " // the messages' shape: routeMessage, writeFirewallEntry
	// Copied out, not filtered in place: the decoded list's array holds every node's entry.
	ownMessages := func(ms []string) []string {
		var own []string
		for _, m := range ms {
			if strings.HasPrefix(m, prefix) {
				own = append(own, m)
			}
		}
		return own
	}
	return func(obj any) {
		switch o := obj.(type) {
		case *ovnv1.EgressFirewall:
			o.Status = ovnv1.EgressFirewallStatus{Messages: ownMessages(o.Status.Messages)}
		case *ovnv1.EgressQoS:
			var own []metav1.Condition
			for _, c := range o.Status.Conditions {
				if c.Type == qosZonePrefix+node {
					own = append(own, c)
				}
			}
			o.Status = ovnv1.EgressQoSStatus{Conditions: own}
		case *ovnv1.AdminPolicyBasedExternalRoute:
			o.Status = ovnv1.AdminPolicyBasedRouteStatus{Messages: ownMessages(o.Status.Messages)}
		}
	}
}
