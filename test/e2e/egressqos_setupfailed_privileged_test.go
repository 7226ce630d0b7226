package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

const qosNotApplied = "EgressQoS Rules not correctly applied"

// TestPrivilegedEgressQoSSetupFailed: an EgressQoS the API accepts but that cannot be applied
// (podSelectors with invalid operators) reports, on every node, the condition
// Ready-In-Zone-<node> False / SetupFailed with upstream's message (one line, "[e1, e2]"), the
// aggregate "EgressQoS Rules not correctly applied" and a Warning Event; like upstream, which
// removes the old rules before it fails to add the new ones, nothing is marked meanwhile. Fixed,
// it marks again. 1000 rules are accepted, 1001 refused with upstream's message.
func TestPrivilegedEgressQoSSetupFailed(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	ctx := context.Background()
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10"); err != nil {
		t.Fatal(err)
	}
	ns := l.CP.Namespace(t)
	voice := map[string]string{"app": "voice"}
	pods := []*lab.Pod{addPod(t, l.Nodes[0], ns, "voice0", lab.PodOptions{Labels: voice}), addPod(t, l.Nodes[1], ns, "voice1", lab.PodOptions{Labels: voice})}
	valid := `
apiVersion: k8s.ovn.org/v1
kind: EgressQoS
metadata: {name: default}
spec:
  egress:
  - {dscp: 46, dstCIDR: 203.0.113.0/24, podSelector: {matchLabels: {app: voice}}}
  - {dscp: 30, dstCIDR: "2001:db8::/48", podSelector: {matchLabels: {app: voice}}}`
	applyAndWait(t, l, ns, valid, qosApplied)
	marked := func(step string, v4, v6 int) {
		t.Helper()
		for _, p := range pods {
			poll.Eventually(t, step+": IPv4", 10*time.Second, dscpIs(p, "203.0.113.10:80", v4))
			poll.Eventually(t, step+": IPv6", 10*time.Second, dscpIs(p, "[2001:db8::10]:80", v6))
		}
	}
	marked("valid", 46, 30)

	apply(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressQoS
metadata: {name: default}
spec:
  egress:
  - {dscp: 46, dstCIDR: 203.0.113.0/24, podSelector: {matchExpressions: [{key: app, operator: Bogus}]}}
  - {dscp: 30, podSelector: {matchExpressions: [{key: app, operator: Sometimes, values: [voice]}]}}`)
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressQoS", ns, "default", "status.status", qosNotApplied, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	failure := fmt.Sprintf(`[cannot create egressqos Rule to destination 203.0.113.0/24 for namespace %s: "Bogus" is not a valid label selector operator, `+
		`cannot create egressqos Rule to destination any for namespace %s: "Sometimes" is not a valid label selector operator]`, ns, ns)
	poll.Eventually(t, "every node's condition SetupFailed", 10*time.Second, func() error {
		q, err := l.Kube.Get(ctx, "k8s.ovn.org/v1", "EgressQoS", ns, "default")
		if err != nil {
			return err
		}
		conds, _, _ := unstructuredSlice(q.Object, "status", "conditions")
		for _, n := range l.Nodes {
			if !hasCondition(conds, "Ready-In-Zone-"+n.Name, "False", "SetupFailed", qosNotApplied+": "+failure) {
				return fmt.Errorf("conditions %v lack Ready-In-Zone-%s False SetupFailed %q", conds, n.Name, qosNotApplied+": "+failure)
			}
		}
		return nil
	})
	waitEventFor(t, l.Client, ns, "reason=EgressQoSNotApplied", "a Warning EgressQoSNotApplied event: <node>: "+failure, func(e corev1.Event) bool {
		return e.Type == "Warning" && strings.HasSuffix(e.Message, ": "+failure)
	})
	marked("cannot be applied", 0, 0)

	applyAndWait(t, l, ns, valid, qosApplied)
	marked("fixed", 46, 30)

	// Upstream's limit: 1000 rules, 1001 refused.
	for _, n := range []int{1000, 1001} {
		var b strings.Builder
		b.WriteString("apiVersion: k8s.ovn.org/v1\nkind: EgressQoS\nmetadata: {name: default}\nspec:\n  egress:\n")
		for i := range n - 1 {
			fmt.Fprintf(&b, "  - {dscp: 10, dstCIDR: 10.%d.%d.0/24}\n", 100+i/250, i%250)
		}
		b.WriteString("  - {dscp: 12, dstCIDR: 203.0.113.0/24}\n")
		apply(t, l, ns, b.String())
		if n == 1000 {
			marked("1000 rules", 12, 0)
			continue
		}
		// The aggregate follows the first node's report; each node's own condition may come later.
		if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressQoS", ns, "default", "status.status", qosNotApplied, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		msg := qosNotApplied + ": cannot create EgressQoS with 1001 rules - maximum is 1000"
		poll.Eventually(t, "node-0's condition SetupFailed for 1001 rules", 10*time.Second, func() error {
			q, err := l.Kube.Get(ctx, "k8s.ovn.org/v1", "EgressQoS", ns, "default")
			if err != nil {
				return err
			}
			if conds, _, _ := unstructuredSlice(q.Object, "status", "conditions"); !hasCondition(conds, "Ready-In-Zone-"+l.Nodes[0].Name, "False", "SetupFailed", msg) {
				return fmt.Errorf("conditions %v lack %q", conds, msg)
			}
			return nil
		})
	}
}
