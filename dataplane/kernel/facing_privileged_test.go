package kernel_test

import (
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedApplierPodMovesInterface: the interface facing a pod address is remembered
// between syncs, and looked up again when its link goes or its route changes: a pod whose
// address comes back behind a new veth (a pod recreated with the same address) gets the
// classifier there; a pod address routed elsewhere fails the pod, each once the watchers have
// told the Applier (which asks for a sync).
func TestPrivilegedApplierPodMovesInterface(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	a := l.applier(t)
	l.mustApply(t, a, fullState())
	if got := l.ingressPrograms(t, "pod0"); len(got) == 0 {
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
	if got := l.ingressPrograms(t, "pod1"); len(got) == 0 {
		t.Errorf("no classifier on pod1, the interface now facing %s", podIP)
	}

	// Only the route changes: the pod's address is routed via the external host.
	time.Sleep(100 * time.Millisecond) // the new veth's events, then none pending
	select {
	case <-a.Changed():
	default:
	}
	// A late event of the new veth may have taken the pod's interface out of the cache (and
	// its signal was drained): a sync puts it back, as the agent's would.
	l.mustApply(t, a, fullState())
	l.node.MustRun(t, "ip", "route", "replace", podIP.String()+"/32", "via", extIP.String())
	select {
	case <-a.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("the Applier heard of no route change")
	}
	if err := l.apply(t, a, fullState()).Failed[podOrigin]; err == nil || !strings.Contains(err.Error(), "routed via") {
		t.Errorf("pod routed away: %v, want its failure", err)
	}
}
