package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane/tc"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

func egressdOn(t *testing.T, n *lab.Node, ifname string) []tc.Program {
	t.Helper()
	progs, err := n.IngressPrograms(ifname)
	if err != nil {
		t.Fatal(err)
	}
	var ours []tc.Program
	for _, p := range progs {
		if p.Name == tc.ProgramName {
			ours = append(ours, p)
		}
	}
	return ours
}

// attachedOnce: egressd's classifier runs once at ingress of the interface, through its tc
// filter (no other program is there).
func attachedOnce(t *testing.T, n *lab.Node, ifname string) func() error {
	return func() error {
		got := egressdOn(t, n, ifname)
		if len(got) != 1 {
			return fmt.Errorf("%d %s programs on %s/%s", len(got), tc.ProgramName, n.Name, ifname)
		}
		if want := fmt.Sprintf("tc filter pref %d handle 0x1", tc.Priority); got[0].Attachment != want {
			return fmt.Errorf("%s on %s/%s attached as %q, want %q", tc.ProgramName, n.Name, ifname, got[0].Attachment, want)
		}
		return nil
	}
}

// TestPrivilegedPodInterfacesGetTheClassifier: egressd finds the host interface facing each
// local pod (a per-pod veth on a routed node, the bridge on a bridged node), attaches its
// classifier there as a tc filter, follows pod add/delete, keeps enforcing while it is down,
// and adopts its filters again after a restart instead of attaching twice; egressctl cleanup
// leaves no filter and no clsact qdisc.
func TestPrivilegedPodInterfacesGetTheClassifier(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	ns := l.CP.Namespace(t)
	ctx := context.Background()
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10"); err != nil {
		t.Fatal(err)
	}
	routed, bridged := l.Nodes[0], l.Nodes[1]
	add := func(n *lab.Node, name string) *lab.Pod {
		p, err := n.AddPod(ctx, ns, name, lab.PodOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b, c := add(routed, "a"), add(routed, "b"), add(bridged, "c")
	poll.Eventually(t, "classifier on pod a's veth", 10*time.Second, attachedOnce(t, routed, a.HostLink))
	poll.Eventually(t, "classifier on pod b's veth", 10*time.Second, attachedOnce(t, routed, b.HostLink))
	poll.Eventually(t, "classifier on the bridge", 10*time.Second, attachedOnce(t, bridged, "cni0"))
	if r := a.TCP("203.0.113.10:443"); r.Outcome != lab.OK {
		t.Fatalf("traffic through the classifier: %s", r)
	}
	before := egressdOn(t, routed, a.HostLink)[0].ID

	// The agent crashes: what it attached stays attached and traffic flows.
	routed.Agent.Kill()
	if got := egressdOn(t, routed, a.HostLink); len(got) != 1 {
		t.Fatalf("agent down: %d programs on %s", len(got), a.HostLink)
	}
	if r := a.TCP("203.0.113.10:443"); r.Outcome != lab.OK {
		t.Fatalf("agent down: %s", r)
	}
	// Created while the agent is down: its egressd-cni fails open (fail closed would fail the ADD).
	d, err := routed.AddPod(ctx, ns, "d", lab.PodOptions{CNIFailOpen: true, CNITimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := routed.StartAgent(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "classifier on pod d's veth after the restart", 10*time.Second, attachedOnce(t, routed, d.HostLink))
	// Adopted, then the new agent's program swapped in: one filter, another program.
	after := egressdOn(t, routed, a.HostLink)
	if len(after) != 1 || after[0].ID == before {
		t.Fatalf("after restart: %+v, want the single filter adopted, running the new agent's program instead of %d", after, before)
	}

	// Deleted pods lose their attachment; a bridge with no local pod left is released.
	if err := b.Delete(ctx); err != nil {
		t.Fatal(err)
	}

	if err := c.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "bridge released, its clsact qdisc removed", 10*time.Second, func() error {
		if got := egressdOn(t, bridged, "cni0"); len(got) != 0 {
			return fmt.Errorf("%d programs still on cni0", len(got))
		}
		if q := bridged.NS.MustRun(t, "tc", "qdisc", "show", "dev", "cni0"); strings.Contains(q, "clsact") {
			return fmt.Errorf("cni0 still has egressd's clsact qdisc: %s", q)
		}
		return nil
	})

	// egressctl cleanup on a node whose agent is stopped leaves nothing of egressd.
	if _, err := routed.Agent.Terminate(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	ctl := egressctl(t)
	pinRoot := lab.PinRoot(l.ID, routed.Name)
	if out, err := routed.NS.Run(ctl, "cleanup", "--bpf-pin-root", pinRoot); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("egressctl cleanup:\n%s", out)
	}
	for _, p := range []*lab.Pod{a, d} {
		if got := egressdOn(t, routed, p.HostLink); len(got) != 0 {
			t.Errorf("after cleanup: %d egressd programs on %s", len(got), p.HostLink)
		}
		if q := routed.NS.MustRun(t, "tc", "qdisc", "show", "dev", p.HostLink); strings.Contains(q, "clsact") {
			t.Errorf("after cleanup: %s still has egressd's clsact qdisc: %s", p.HostLink, q)
		}
	}
	if _, err := os.Stat(pinRoot); err == nil {
		t.Errorf("after cleanup: %s still exists", pinRoot)
	}
	if r := a.TCP("203.0.113.10:443"); r.Outcome != lab.OK {
		t.Errorf("after cleanup: %s", r)
	}
}
