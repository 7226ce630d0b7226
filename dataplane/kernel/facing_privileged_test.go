package kernel_test

import (
	"testing"
	"time"

	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedApplierPodMovesInterface: the interface facing a pod address is remembered
// between syncs, and looked up again when its link goes: a pod whose address comes back behind
// a new veth (a pod recreated with the same address) gets the classifier there, once the link
// watcher has told the Applier.
func TestPrivilegedApplierPodMovesInterface(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	a := l.applier(t)
	l.mustApply(t, a, fullState())
	if got := l.tcxPrograms(t, "pod0"); len(got) == 0 {
		t.Fatalf("no classifier on pod0")
	}
	// The pod is recreated: its old veth goes, a new one takes its address.
	l.node.MustRun(t, "ip", "link", "del", "pod0")
	pod2 := netns.New(t, "pod2")
	netns.Veth(t, l.node, "pod1", pod2, "eth0")
	l.node.MustRun(t, "ip", "route", "add", podIP.String()+"/32", "dev", "pod1", "scope", "link")
	select {
	case <-a.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("the Applier heard of no link change")
	}
	l.mustApply(t, a, fullState())
	if got := l.tcxPrograms(t, "pod1"); len(got) == 0 {
		t.Errorf("no classifier on pod1, the interface now facing %s", podIP)
	}
}
