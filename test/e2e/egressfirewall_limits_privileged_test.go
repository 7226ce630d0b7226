package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// manyRulesYAML is an EgressFirewall of n rules: n-2 allows of unrelated /24s, then the rules
// last4 and last6.
func manyRulesYAML(n int, last4, last6 string) string {
	var b strings.Builder
	b.WriteString("apiVersion: k8s.ovn.org/v1\nkind: EgressFirewall\nmetadata: {name: default}\nspec:\n  egress:\n")
	for i := range n - 2 {
		fmt.Fprintf(&b, "  - {type: Allow, to: {cidrSelector: 10.%d.%d.0/24}}\n", 100+i/250, i%250)
	}
	fmt.Fprintf(&b, "  - %s\n  - %s\n", last4, last6)
	return b.String()
}

// TestPrivilegedEgressFirewallLimits: upstream's limits and messages. 8001 rules are accepted
// (upstream checks the last index against 8000) and the 8001st is enforced, IPv4 and IPv6; 8002
// are refused with upstream's message while the rules in force stay; several errors make one
// line "[e1, e2]" in the status and the Event.
func TestPrivilegedEgressFirewallLimits(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 1, Agents: true})
	ctx := context.Background()
	addExternals(t, l, []string{"web", "203.0.113.10", "2001:db8::10"})
	ns := l.CP.Namespace(t)
	p := addPod(t, l.Nodes[0], ns, "p", lab.PodOptions{})
	node := l.Nodes[0].Name

	applyFirewall(t, l, ns, manyRulesYAML(8001, "{type: Allow, to: {cidrSelector: 203.0.113.0/24}}", `{type: Deny, to: {cidrSelector: "2001:db8::/32"}}`))
	checkReach(t, "8001 rules", []reach{{p, "203.0.113.10:80", false, lab.OK}, {p, "[2001:db8::10]:80", false, lab.Timeout}})

	// 8002 rules whose last ones would invert both verdicts: refused, the 8001 stay in force.
	apply(t, l, ns, manyRulesYAML(8002, "{type: Deny, to: {cidrSelector: 203.0.113.0/24}}", `{type: Allow, to: {cidrSelector: "2001:db8::/32"}}`))
	tooMany := fmt.Sprintf("%s: %s: egressFirewall for namespace %s has too many rules, max allowed number is 8000", node, fwNotApplied, ns)
	waitFirewallMessage(t, l, ns, tooMany)
	checkReach(t, "8002 rules refused", []reach{{p, "203.0.113.10:80", false, lab.OK}, {p, "[2001:db8::10]:80", false, lab.Timeout}})

	apply(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {dnsName: "-a.example.com"}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
  - {type: Allow, to: {dnsName: "-b.example.com"}}`)
	rule := "cannot create EgressFirewall Rule to destination  for namespace " + ns + ": invalid dns name used as rule destination, "
	twoErrors := "[" + rule + "-a.example.com, " + rule + "-b.example.com]"
	waitFirewallMessage(t, l, ns, node+": "+fwNotApplied+": "+twoErrors)
	poll.Eventually(t, "an Event with both errors on one line", 10*time.Second, func() error {
		events, err := l.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=EgressFirewallNotApplied"})
		if err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Message == node+": "+twoErrors {
				return nil
			}
		}
		return fmt.Errorf("%d EgressFirewallNotApplied events, none %q", len(events.Items), node+": "+twoErrors)
	})
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default", "status.status", fwNotApplied, 10*time.Second); err != nil {
		t.Error(err)
	}
}

// waitFirewallMessage waits until the namespace's EgressFirewall's status.messages hold msg.
func waitFirewallMessage(t *testing.T, l *lab.Lab, ns, msg string) {
	t.Helper()
	poll.Eventually(t, "status message "+msg, 20*time.Second, func() error {
		ef, err := l.Kube.Get(context.Background(), "k8s.ovn.org/v1", "EgressFirewall", ns, "default")
		if err != nil {
			return err
		}
		if msgs, _, _ := unstructuredStrings(ef.Object, "status", "messages"); !contains(msgs, msg) {
			return fmt.Errorf("messages %q", msgs)
		}
		return nil
	})
}
