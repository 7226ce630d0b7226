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

const qosApplied = "EgressQoS Rules applied"

// applyQoS applies namespace ns's EgressQoS with the rules (YAML lines of spec.egress) and
// waits until every node applied it.
func applyQoS(t *testing.T, l *lab.Lab, ns, rules string) {
	t.Helper()
	applyAndWait(t, l, ns, "apiVersion: k8s.ovn.org/v1\nkind: EgressQoS\nmetadata: {name: default}\nspec:\n  egress:\n"+rules, qosApplied)
}

// dscpSeen sends UDP from p to dst and returns the DSCP the server saw (-1 if it saw nothing).
func dscpSeen(p *lab.Pod, dst string) int {
	r := p.UDP(dst, lab.ClientOptions{Timeout: quick, TOS: 1}) // ECN bit 1 set by the sender
	if r.Outcome != lab.OK {
		return -1
	}
	if r.Seen.ECN != 1 {
		return -2 // ECN bits not kept
	}
	return int(r.Seen.DSCP)
}

// dscpIs is the condition that the DSCP the server sees from p to dst is want.
func dscpIs(p *lab.Pod, dst string, want int) func() error {
	return func() error {
		if got := dscpSeen(p, dst); got != want {
			return fmt.Errorf("%s (%s CNI) -> %s: DSCP %d, want %d", p.Name, p.Node.CNI, dst, got, want)
		}
		return nil
	}
}

// TestPrivilegedEgressQoS: the DSCP the external server sees, by dstCIDR and podSelector, first
// rule wins, IPv4 and IPv6, both CNI shapes, ECN kept; a pod label change, an update and a
// delete take effect; status per node and aggregate.
func TestPrivilegedEgressQoS(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	ctx := context.Background()
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AddExternal("other", lab.ExternalOptions{}, "198.51.100.10", "2001:db8:1::10"); err != nil {
		t.Fatal(err)
	}
	ns := l.CP.Namespace(t)
	voice0 := addPod(t, l.Nodes[0], ns, "voice0", lab.PodOptions{Labels: map[string]string{"app": "voice"}})
	voice1 := addPod(t, l.Nodes[1], ns, "voice1", lab.PodOptions{Labels: map[string]string{"app": "voice"}})
	web0 := addPod(t, l.Nodes[0], ns, "web0", lab.PodOptions{Labels: map[string]string{"app": "web"}})
	applyQoS(t, l, ns, `
  - {dscp: 46, dstCIDR: 203.0.113.0/24, podSelector: {matchLabels: {app: voice}}}
  - {dscp: 30, dstCIDR: "2001:db8::/48"}
  - {dscp: 10}`)
	q, _ := l.Kube.Get(ctx, "k8s.ovn.org/v1", "EgressQoS", ns, "default")
	conds, _, _ := unstructuredSlice(q.Object, "status", "conditions")
	for _, n := range l.Nodes {
		if !hasCondition(conds, "Ready-In-Zone-"+n.Name, "True", "SetupSucceeded", qosApplied) {
			t.Errorf("conditions %v lack Ready-In-Zone-%s", conds, n.Name)
		}
	}
	for _, c := range []struct {
		p    *lab.Pod
		dst  string
		want int
	}{
		{voice0, "203.0.113.10:80", 46},
		{voice1, "203.0.113.10:80", 46},
		{web0, "203.0.113.10:80", 10},      // podSelector excludes it
		{voice0, "198.51.100.10:80", 10},   // outside the CIDR
		{voice1, "[2001:db8::10]:80", 30},  // IPv6, rule 1
		{web0, "[2001:db8:1::10]:443", 10}, // 2001:db8:1:: is outside 2001:db8::/48
	} {
		poll.Eventually(t, "DSCP by the first rule that matches", 10*time.Second, dscpIs(c.p, c.dst, c.want))
	}

	series := `egressd_egressqos_marked_packets_total{dscp="46",namespace="` + ns + `",rule="0"}`
	if v, err := l.Nodes[1].Agent.Sample(series); err != nil || v == "" || v == "0" {
		t.Errorf("%s on node-1 = %q (%v), want > 0", series, v, err)
	}
	out, err := l.Nodes[0].NS.Run(egressctl(t), "trace", "--bpf-pin-root", lab.PinRoot(l.ID, l.Nodes[0].Name), voice0.IPv4.String(), "203.0.113.10", "udp/80")
	if want := "qos:      DSCP 46 by rule 0: DSCP 46 to 203.0.113.0/24 for pods app=voice"; err != nil || !strings.Contains(out, want) {
		t.Errorf("egressctl trace: %v\n%s\nwant %q", err, out, want)
	}
	// Relabelling a pod moves it between rules, without touching the others.
	pod, err := l.Client.CoreV1().Pods(ns).Get(ctx, "web0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Labels["app"] = "voice"
	if _, err := l.Client.CoreV1().Pods(ns).Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "the relabelled pod marked", 10*time.Second, dscpIs(web0, "203.0.113.10:80", 46))
	poll.Eventually(t, "the other pods still marked", 10*time.Second, dscpIs(voice1, "203.0.113.10:80", 46))

	// Update: the first rule now marks 34.
	apply(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressQoS
metadata: {name: default}
spec:
  egress:
  - {dscp: 34, dstCIDR: 203.0.113.0/24, podSelector: {matchLabels: {app: voice}}}`)
	poll.Eventually(t, "the update enforced", 10*time.Second, dscpIs(voice0, "203.0.113.10:80", 34))
	poll.Eventually(t, "the removed rules unmarked", 10*time.Second, dscpIs(voice0, "198.51.100.10:80", 0))

	// Delete: nothing is marked any more (the sender's own DSCP 0 arrives).
	if err := l.Kube.Delete(ctx, "k8s.ovn.org/v1", "EgressQoS", ns, "default"); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "the deleted EgressQoS lifted", 10*time.Second, dscpIs(voice1, "203.0.113.10:80", 0))
}

func hasCondition(conds []any, typ, status, reason, msg string) bool {
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == status && m["reason"] == reason && m["message"] == msg {
			return true
		}
	}
	return false
}
