package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane/tcx"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

func egressdOn(t *testing.T, n *lab.Node, ifname string) []tcx.Program {
	t.Helper()
	progs, err := n.TCXIngress(ifname)
	if err != nil {
		t.Fatal(err)
	}
	var ours []tcx.Program
	for _, p := range progs {
		if p.Name == tcx.ProgramName {
			ours = append(ours, p)
		}
	}
	return ours
}

func attachedOnce(t *testing.T, l *lab.Lab, n *lab.Node, ifname string) func() error {
	return func() error {
		if got := egressdOn(t, n, ifname); len(got) != 1 {
			return fmt.Errorf("%d %s programs on %s/%s", len(got), tcx.ProgramName, n.Name, ifname)
		}
		_, err := os.Stat(filepath.Join(tcx.LinksDir(lab.PinRoot(l.ID, n.Name)), "tcx_ingress_"+ifname))
		return err
	}
}

// TestPrivilegedPodInterfacesGetTheClassifier: egressd finds the host interface facing each
// local pod (a per-pod veth on a routed node, the bridge on a bridged node), attaches its
// classifier there with a pinned link, follows pod add/delete, keeps enforcing while it is
// down, and adopts its links again after a restart instead of attaching twice.
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
	poll.Eventually(t, "classifier on pod a's veth", 10*time.Second, attachedOnce(t, l, routed, a.HostLink))
	poll.Eventually(t, "classifier on pod b's veth", 10*time.Second, attachedOnce(t, l, routed, b.HostLink))
	poll.Eventually(t, "classifier on the bridge", 10*time.Second, attachedOnce(t, l, bridged, "cni0"))
	if r := a.TCP("203.0.113.10:443"); r.Outcome != lab.OK {
		t.Fatalf("traffic through the classifier: %s", r)
	}
	before := egressdOn(t, routed, a.HostLink)[0].LinkID

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
	poll.Eventually(t, "classifier on pod d's veth after the restart", 10*time.Second, attachedOnce(t, l, routed, d.HostLink))
	after := egressdOn(t, routed, a.HostLink)
	if len(after) != 1 || after[0].LinkID != before {
		t.Fatalf("after restart: %+v, want the same single link %d adopted", after, before)
	}

	// Deleted pods lose their attachment; a bridge with no local pod left is released.
	if err := b.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	pinB := filepath.Join(tcx.LinksDir(lab.PinRoot(l.ID, routed.Name)), "tcx_ingress_"+b.HostLink)
	poll.Eventually(t, "pin of deleted pod b removed", 10*time.Second, func() error {
		if _, err := os.Stat(pinB); err == nil {
			return fmt.Errorf("%s still pinned", pinB)
		}
		return nil
	})
	if err := c.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "bridge released", 10*time.Second, func() error {
		if got := egressdOn(t, bridged, "cni0"); len(got) != 0 {
			return fmt.Errorf("%d programs still on cni0", len(got))
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
	}
	if _, err := os.Stat(pinRoot); err == nil {
		t.Errorf("after cleanup: %s still exists", pinRoot)
	}
	if r := a.TCP("203.0.113.10:443"); r.Outcome != lab.OK {
		t.Errorf("after cleanup: %s", r)
	}
}
