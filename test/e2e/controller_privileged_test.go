package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedAgentsWithoutController: with the controller gone, the agents keep what it
// decided: a selected pod keeps leaving with its egress IP, and a new selected pod, on a node
// that steers it and on the egress node, is programmed from the current assignment and leaves
// with it too. The controller back, it changes nothing that was right.
func TestPrivilegedAgentsWithoutController(t *testing.T) {
	privileged.Require(t)
	e := newEIPLab(t, 3) // the controller on node 0; nodes 1 and 2 egress-assignable
	n0, n1 := e.Nodes[0], e.Nodes[1]
	ip := netip.MustParseAddr(eip4)
	old := addPod(t, n0, e.ns, "old", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	name := e.egressIP(t, "nocontroller", "eip", ip)
	var placed string
	poll.Eventually(t, "the egress IP placed", 20*time.Second, func() error {
		if placed = e.nodeOf(t, name, ip); placed == "" {
			return fmt.Errorf("not placed")
		}
		return nil
	})
	eventuallySource(t, "with the controller", old, webAddr(web4), ip)

	n0.Controller.Kill()
	steered := addPod(t, n0, e.ns, "steered", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	local := addPod(t, e.node(placed), e.ns, "local", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	for _, p := range []*lab.Pod{old, steered, local} {
		eventuallySource(t, "no controller", p, webAddr(web4), ip)
	}
	if got := e.nodeOf(t, name, ip); got != placed {
		t.Errorf("the egress IP moved from %s to %q with no controller", placed, got)
	}

	if err := n1.StartController(context.Background()); err != nil {
		t.Fatal(err)
	}
	leaderNode(t, e.Lab)
	// Several reconciles of the new leader: what is tested is that nothing moves.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if got := e.nodeOf(t, name, ip); got != placed {
			t.Fatalf("the new controller moved the egress IP from %s to %q", placed, got)
		}
	}
	for _, p := range []*lab.Pod{old, steered, local} {
		eventuallySource(t, "controller back", p, webAddr(web4), ip)
	}
}

// TestPrivilegedEgressServiceLabelDeadAgent: the host of an EgressService changes while the old
// host's agent is dead and its node up (its kernel answers). The controller takes the old
// host's label off itself and only then labels the new host, at once: never two nodes labelled
// (an LB provider would announce the LB IP from both), and no wait on an agent that cannot
// answer (before the controller, the dead agent's label stayed and the new host labelled
// itself 5 s later: two labelled nodes for good).
func TestPrivilegedEgressServiceLabelDeadAgent(t *testing.T) {
	privileged.Require(t)
	e := newEIPLab(t, 3)
	l := e.Lab
	ctx := context.Background()
	n1, n2 := l.Nodes[1], l.Nodes[2]
	setLabel := func(n *lab.Node, v string) {
		t.Helper()
		patch := `{"metadata":{"labels":{"egress-host":null}}}`
		if v != "" {
			patch = `{"metadata":{"labels":{"egress-host":"` + v + `"}}}`
		}
		if _, err := l.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setLabel(n1, "yes")
	addPod(t, n2, e.ns, "ep", lab.PodOptions{Labels: map[string]string{"app": "lb"}})
	loadBalancerEgressService(t, l, e.ns, "", lbIP4)
	label := "egress-service.k8s.ovn.org/" + e.ns + "-lb"
	waitHost(t, l, e.ns, "lb", n1.Name)
	waitLabel(t, l, label, n1.Name)

	n1.Agent.Kill()
	labels := watchLabel(t, l, label)
	moved := time.Now()
	setLabel(n2, "yes")
	setLabel(n1, "")
	waitHost(t, l, e.ns, "lb", n2.Name)
	waitLabel(t, l, label, n2.Name)
	took := time.Since(moved)
	labels.check(t, "host moved off a node whose agent is dead")
	t.Logf("the label moved from %s (agent dead) to %s %s after the nodeSelector changed", n1.Name, n2.Name, took.Round(time.Millisecond))
	if took > 4*time.Second {
		t.Errorf("the label took %s to move: the controller should not wait for the dead agent", took.Round(time.Millisecond))
	}
}
