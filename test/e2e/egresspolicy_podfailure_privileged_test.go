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

// misroute routes the pod's address of one family (v6 or not) via a peer node instead of its
// interface: the node no longer finds the interface facing the pod. It returns the undo.
func misroute(t *testing.T, p *lab.Pod, peer *lab.Node, v6 bool) func() {
	t.Helper()
	family, ip, via := "-4", p.IPv4.String()+"/32", peer.IPv4.String()
	if v6 {
		family, ip, via = "-6", p.IPv6.String()+"/128", peer.IPv6.String()
	}
	// The routed CNI's own route to the pod, which the undo puts back; the bridged CNI has
	// none (the bridge's subnet route reaches the pod).
	orig, err := p.Node.NS.Run("ip", family, "route", "show", ip)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Node.NS.Run("ip", family, "route", "replace", ip, "via", via); err != nil {
		t.Fatal(err)
	}
	return func() {
		args := []string{family, "route", "del", ip}
		if orig = strings.TrimSpace(orig); orig != "" {
			args = append([]string{family, "route", "replace"}, strings.Fields(orig)...)
		}
		if _, err := p.Node.NS.Run("ip", args...); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPrivilegedPodFailuresInPolicyStatus: a local pod whose interface the node cannot find
// (its address routed elsewhere, IPv4 for one pod, IPv6 for another; routed and bridged CNI)
// is not under its namespace's policies: the node says so in the EgressFirewall's status
// message and the EgressQoS's condition (SetupFailed), naming the pods on one line, with
// Warning Events. Once the pods' interfaces are back, both report applied again.
func TestPrivilegedPodFailuresInPolicyStatus(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	ctx := context.Background()
	ns := l.CP.Namespace(t)
	r4 := addPod(t, l.Nodes[0], ns, "r4", lab.PodOptions{})
	r6 := addPod(t, l.Nodes[0], ns, "r6", lab.PodOptions{})
	b6 := addPod(t, l.Nodes[1], ns, "b6", lab.PodOptions{})
	applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec: {egress: [{type: Deny, to: {cidrSelector: 203.0.113.0/24}}]}`)
	applyAndWait(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressQoS
metadata: {name: default}
spec: {egress: [{dscp: 46}]}`, qosApplied)

	undo := []func(){misroute(t, r4, l.Nodes[1], false), misroute(t, r6, l.Nodes[1], true), misroute(t, b6, l.Nodes[0], true)}
	// The node notices at its next sync: a change in the namespace.
	apply(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec: {egress: [{type: Deny, to: {cidrSelector: 203.0.113.0/24}}, {type: Deny, to: {cidrSelector: 198.51.100.0/24}}]}`)
	// What each node must name: its pods, and the address it could not place.
	blamed := map[string][]string{
		l.Nodes[0].Name: {"pod r4: pod address " + r4.IPv4.String() + " is routed via", "pod r6: pod address " + r6.IPv6.String() + " is routed via"},
		l.Nodes[1].Name: {"pod b6: pod address " + b6.IPv6.String() + " is routed via"},
	}
	names := func(msg, node string) error {
		if strings.Contains(msg, "\n") {
			return fmt.Errorf("%q is not one line", msg)
		}
		for _, want := range blamed[node] {
			if !strings.Contains(msg, want) {
				return fmt.Errorf("%q does not name %q", msg, want)
			}
		}
		return nil
	}
	poll.Eventually(t, "the pods' failures in both policies' status", 20*time.Second, func() error {
		ef, err := l.Kube.Get(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default")
		if err != nil {
			return err
		}
		q, err := l.Kube.Get(ctx, "k8s.ovn.org/v1", "EgressQoS", ns, "default")
		if err != nil {
			return err
		}
		msgs, _, _ := unstructuredStrings(ef.Object, "status", "messages")
		conds, _, _ := unstructuredSlice(q.Object, "status", "conditions")
		for _, n := range l.Nodes {
			prefix := n.Name + ": " + fwNotApplied + ": "
			var msg string
			for _, m := range msgs {
				if strings.HasPrefix(m, prefix) {
					msg = m
				}
			}
			if msg == "" {
				return fmt.Errorf("EgressFirewall messages %q: none from %s not applied", msgs, n.Name)
			}
			if err := names(msg, n.Name); err != nil {
				return fmt.Errorf("EgressFirewall: %w", err)
			}
			cond := unstructuredCondition(conds, "Ready-In-Zone-"+n.Name)
			if cond["status"] != "False" || cond["reason"] != "SetupFailed" || !strings.HasPrefix(fmt.Sprint(cond["message"]), qosNotApplied+": ") {
				return fmt.Errorf("EgressQoS condition of %s: %v", n.Name, cond)
			}
			if err := names(fmt.Sprint(cond["message"]), n.Name); err != nil {
				return fmt.Errorf("EgressQoS: %w", err)
			}
		}
		if s, _ := ef.Object["status"].(map[string]any)["status"].(string); s != fwNotApplied {
			return fmt.Errorf("EgressFirewall status.status %q", s)
		}
		if s, _ := q.Object["status"].(map[string]any)["status"].(string); s != qosNotApplied {
			return fmt.Errorf("EgressQoS status.status %q", s)
		}
		return nil
	})
	for _, reason := range []string{"EgressFirewallNotApplied", "EgressQoSNotApplied"} {
		waitEventFor(t, l.Client, ns, "reason="+reason, "a "+reason+" Warning event naming pod b6", func(e corev1.Event) bool {
			return e.Type == "Warning" && strings.Contains(e.Message, "pod b6: ")
		})
	}

	for _, u := range undo {
		u()
	}
	// The failed sync is retried (with a backoff): no event is needed.
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default", "status.status", fwApplied, 40*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressQoS", ns, "default", "status.status", qosApplied, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// unstructuredCondition returns the condition of type typ in conds (nil if absent).
func unstructuredCondition(conds []any, typ string) map[string]any {
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == typ {
			return m
		}
	}
	return nil
}
