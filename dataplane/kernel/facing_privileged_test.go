package kernel_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane"
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
	select { // the old veth's filters went with it: that sync was urgent
	case <-a.Urgent():
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
	if len(a.Urgent()) > 0 {
		t.Error("a route change asked for a sync at once: the sync loop paces them")
	}
	if err := l.apply(t, a, fullState()).Failed[podOrigin]; err == nil || !strings.Contains(err.Error(), "routed via") {
		t.Errorf("pod routed away: %v, want its failure", err)
	}
}

// TestPrivilegedApplierPodBehindGatewayDevice: a node that routes its pods through a device of
// its own (Cilium's cilium_host, a veth whose peer stays in the node's namespace) gets the
// classifier on the pod's veth that the CNI named, not on the gateway device; without the
// CNI's word the pod fails, with the reason.
func TestPrivilegedApplierPodBehindGatewayDevice(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	l.node.MustRun(t, "ip", "link", "add", "gw_host", "type", "veth", "peer", "name", "gw_net")
	for _, s := range []string{"ip link set gw_host up", "ip link set gw_net up",
		"ip route replace " + podIP.String() + "/32 dev gw_host"} {
		if err := l.node.Script(s); err != nil {
			t.Fatal(err)
		}
	}
	a := l.applier(t)
	named := fullState()
	named.Classifier.Pods[0].HostInterfaces = []string{"pod0"}
	l.mustApply(t, a, named)
	if got := l.ingressPrograms(t, "pod0"); len(got) == 0 {
		t.Errorf("no classifier on pod0, the veth the CNI named")
	}
	if got := l.ingressPrograms(t, "gw_host"); len(got) != 0 {
		t.Errorf("classifier on the gateway device gw_host: %v", got)
	}

	a2 := l.applier(t) // nothing remembered
	err := l.apply(t, a2, fullState()).Failed[podOrigin]
	if err == nil || !strings.Contains(err.Error(), "gw_host, a device of the node's own") {
		t.Errorf("pod behind gw_host without the CNI's word: %v, want its failure naming gw_host", err)
	}
}

// TestPrivilegedApplierPodRoutes: the interface facing a pod address is the one the kernel
// routes it through, whatever route says so; an address the node holds, or cannot reach, fails
// the pod with the reason.
func TestPrivilegedApplierPodRoutes(t *testing.T) {
	privileged.Require(t)
	podIP6 := netip.MustParseAddr("fd00:10:244::5")
	withIPv6 := func() *dataplane.State {
		s := fullState()
		s.Classifier.Pods[0].IPs = append(s.Classifier.Pods[0].IPs, podIP6)
		return s
	}
	for _, tc := range []struct {
		name   string
		script []string
		state  func() *dataplane.State
		fails  string // "": the classifier is on pod0
	}{
		{name: "IPv4 and IPv6 routes to the veth", state: withIPv6,
			script: []string{"ip -6 route add " + podIP6.String() + "/128 dev pod0"}},
		{name: "the pod's subnet on the veth", state: fullState,
			script: []string{"ip route del " + podIP.String() + "/32", "ip route add 10.244.0.0/24 dev pod0"}},
		{name: "an address of the node", state: fullState,
			script: []string{"ip addr add " + podIP.String() + "/32 dev ext0"}, fails: "local to the node"},
		{name: "unreachable", state: fullState,
			script: []string{"ip route replace unreachable " + podIP.String() + "/32"}, fails: "no route to pod address"},
		{name: "IPv6 unreachable", state: withIPv6,
			script: []string{"ip -6 route add unreachable " + podIP6.String() + "/128"}, fails: "no route to pod address " + podIP6.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			l.pod.Addr(t, "eth0", podIP6.String()+"/128")
			if err := l.node.Script(tc.script...); err != nil {
				t.Fatal(err)
			}
			err := l.apply(t, l.applier(t), tc.state()).Failed[podOrigin]
			switch {
			case tc.fails == "" && err != nil:
				t.Fatalf("pod failed: %v", err)
			case tc.fails == "" && len(l.ingressPrograms(t, "pod0")) == 0:
				t.Fatal("no classifier on pod0")
			case tc.fails != "" && (err == nil || !strings.Contains(err.Error(), tc.fails)):
				t.Fatalf("pod's failure: %v, want one saying %q", err, tc.fails)
			}
		})
	}
}
