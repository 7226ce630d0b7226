package kernel_test

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/kernel"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// sectioned are the facilities an Apply skips when their part of the state did not change.
var sectioned = []string{"nftables", "addresses", "tunnel", "routing"}

// skips reads egressd_dataplane_apply_phase_skipped_total by facility.
func skips(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "egressd_dataplane_apply_phase_skipped_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

// deleteOwnedRule deletes the first of egressd's ip rules behind its back (no event tells of
// it) and returns the rules as they were.
func deleteOwnedRule(t *testing.T, l *lab) []string {
	t.Helper()
	rules := l.ownedRules(t)
	if len(rules) == 0 {
		t.Fatal("egressd owns no ip rule")
	}
	fam, rest, _ := strings.Cut(rules[0], " ")
	prio, _, _ := strings.Cut(rest, ":")
	l.node.MustRun(t, "ip", fam, "rule", "del", "priority", prio)
	return rules
}

// TestPrivilegedApplierSkipsWhatDidNotChange: an Apply of a state equal to the last one (new
// slices, as every sync makes them) skips nftables, addresses, tunnel and routing; a changed
// part is applied by its facility alone; a kernel change egressd hears of (a link added) makes
// the next Apply run every facility, which repairs what changed unseen meanwhile (a rule of
// egressd's deleted behind its back).
func TestPrivilegedApplierSkipsWhatDidNotChange(t *testing.T) {
	privileged.Require(t)
	l, a, reg := settledApplier(t)
	before := skips(t, reg)
	l.mustApply(t, a, fullState())
	wantAllSkipped(t, before, skips(t, reg), "an Apply of the same state")

	changed := fullState()
	extra := netip.MustParsePrefix("198.18.9.0/24")
	changed.Routing.Tables[0].Routes = append(changed.Routing.Tables[0].Routes, dataplane.Route{Dst: extra, Via: &dataplane.Nexthop{Gateway: extIP}})
	before = skips(t, reg)
	l.mustApply(t, a, changed)
	after := skips(t, reg)
	if after["routing"] != before["routing"] || after["nftables"] != before["nftables"]+1 {
		t.Errorf("a changed routing part: skipped %v, before %v; want routing applied, nftables skipped", after, before)
	}
	if got := l.ip(t, "-4", "route", "show", "table", "all"); !strings.Contains(got, extra.String()) {
		t.Errorf("the route added to the state is not in the kernel:\n%s", got)
	}

	rules := deleteOwnedRule(t, l)
	l.node.MustRun(t, "ip", "link", "add", "news0", "type", "bridge")
	select {
	case <-a.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("no sync asked for after a link was added")
	}
	before = skips(t, reg)
	l.mustApply(t, a, changed)
	if after := skips(t, reg); !maps.Equal(after, before) {
		t.Errorf("the Apply after a kernel change skipped %v (before %v), want none", after, before)
	}
	if got := l.ownedRules(t); !slices.Equal(got, rules) {
		t.Errorf("after the full pass egressd's rules are %q, want %q", got, rules)
	}
}

// TestPrivilegedApplierFullPassRepairs: with nothing else happening, the full pass asks for a
// sync within Options.FullPass, and that sync puts back what changed unseen.
func TestPrivilegedApplierFullPassRepairs(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	a := l.applierWith(t, kernel.Options{FullPass: time.Second})
	l.mustApply(t, a, fullState())
	quiet(a)
	l.mustApply(t, a, fullState())
	rules := deleteOwnedRule(t, l)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case <-a.Changed():
		case <-deadline:
			t.Fatalf("egressd's rules are %q 5 s after one was deleted, want %q", l.ownedRules(t), rules)
		}
		l.mustApply(t, a, fullState())
		if slices.Equal(l.ownedRules(t), rules) {
			return
		}
	}
}

// TestPrivilegedApplierPodInterfaceIsNoNews: a pod's new interface (a veth made in the pod's
// namespace and its host end moved out, renamed and set up, as the reference plugins do), a
// routed CNI's host routes to the pod through it, changed, a pod's interface made on the node
// with its pod end moved in (as Cilium does), and the pods' deletion (their namespaces torn
// down, which takes the interfaces and the IPv6 route with them) ask for syncs, and those skip
// nftables, addresses, tunnel and routing, which never read a pod's interface: the classifier
// and attach, which do, run at every sync. A bridge added is news
// (TestPrivilegedApplierSkipsWhatDidNotChange), and so is a gateway pod's deletion
// (TestPrivilegedApplierGatewayPodDeletionIsNews).
func TestPrivilegedApplierPodInterfaceIsNoNews(t *testing.T) {
	privileged.Require(t)
	l, a, reg, base := dualStackApplier(t)
	pod := podBehind(t, l, "pod9", "10.244.9.9/32", "fd00:10:244::9/128")
	withPod := *base
	withPod.Classifier.Pods = append(slices.Clip(base.Classifier.Pods), dataplane.Pod{Origin: dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "p9"},
		IPs: []netip.Addr{netip.MustParseAddr("10.244.9.9"), netip.MustParseAddr("fd00:10:244::9")}, QoSRules: []int{0}})
	after := func(what string, s *dataplane.State) {
		t.Helper()
		before := changedThenQuiet(t, a, reg, what)
		l.mustApply(t, a, s) // the classifier finds the pods' interfaces through their routes
		wantAllSkipped(t, before, skips(t, reg), "the Apply after "+what)
	}
	after("a pod's interface and routes came", &withPod)
	l.node.MustRun(t, "ip", "route", "replace", "10.244.9.9/32", "dev", "pod9", "proto", "static")
	after("the pod's host route changed", &withPod)
	cilium := netns.New(t, "lxc")
	l.node.MustRun(t, "ip", "link", "add", "lxc9", "type", "veth", "peer", "name", "tmp9")
	l.node.MustRun(t, "ip", "link", "set", "tmp9", "netns", cilium.Name)
	l.node.MustRun(t, "ip", "link", "set", "lxc9", "up")
	cilium.MustRun(t, "ip", "link", "set", "tmp9", "name", "eth0", "up")
	after("a pod's interface made on the node came", &withPod)
	for _, ns := range []*netns.NS{pod, cilium} {
		if err := ns.Delete(); err != nil {
			t.Fatal(err)
		}
	}
	after("the pods were deleted", base)
}

// TestPrivilegedApplierGatewayPodDeletionIsNews: the deletion of a pod that egressd's routes
// use as a gateway takes those routes with it, silently for IPv4: its interface's events are
// news, and routing writes the routes again, here through the gateway's next route.
func TestPrivilegedApplierGatewayPodDeletionIsNews(t *testing.T) {
	privileged.Require(t)
	l, a, reg, base := dualStackApplier(t)
	pod := podBehind(t, l, "gw9", "10.244.9.9/32")
	l.node.MustRun(t, "ip", "route", "add", "10.244.9.0/24", "dev", "ext0")
	viaPod := *base
	viaPod.Routing.Tables = []dataplane.RouteTable{{Origin: eipOrigin, ID: 1, Routes: []dataplane.Route{
		{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: &dataplane.Nexthop{Gateway: netip.MustParseAddr("10.244.9.9")}},
		{Dst: netip.MustParsePrefix("::/0"), Blackhole: true},
	}}}
	changedThenQuiet(t, a, reg, "a gateway pod's interface came")
	l.mustApply(t, a, &viaPod)
	quiet(a)
	if out := l.node.MustRun(t, "ip", "route", "show", "table", fmt.Sprint(table), "default"); !strings.Contains(out, "dev gw9") {
		t.Fatalf("the route is not through the gateway pod: %q", out)
	}
	if err := pod.Delete(); err != nil {
		t.Fatal(err)
	}
	before := changedThenQuiet(t, a, reg, "the gateway pod was deleted")
	l.mustApply(t, a, &viaPod)
	if after := skips(t, reg); after["routing"] != before["routing"] {
		t.Errorf("routing skipped the Apply after a gateway pod was deleted")
	}
	if out := l.node.MustRun(t, "ip", "route", "show", "table", fmt.Sprint(table), "default"); !strings.Contains(out, "dev ext0") {
		t.Errorf("the route is not written again through the gateway's next route: %q", out)
	}
}

// TestPrivilegedApplierNodeVethIsNews: a veth holding one of the node's addresses is the
// node's, whether it held it before egressd started (the addresses listed when it subscribed)
// or gained it since (the address events): its link events are news for every facility. Once
// the address is gone, it is a pod's as any other veth.
func TestPrivilegedApplierNodeVethIsNews(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	peers := netns.New(t, "peers")
	netns.Veth(t, l.node, "early0", peers, "e0")
	l.node.Addr(t, "early0", "192.0.2.77/24")
	a, reg := settle(t, l)
	netns.Veth(t, l.node, "late0", peers, "l0")
	changedThenQuiet(t, a, reg, "a veth came")
	l.mustApply(t, a, fullState())
	l.node.Addr(t, "late0", "198.51.100.77/24")
	changedThenQuiet(t, a, reg, "the node's address put on a veth")
	l.mustApply(t, a, fullState())
	for _, veth := range []string{"early0", "late0"} {
		l.node.MustRun(t, "ip", "link", "set", veth, "mtu", "1400")
		before := changedThenQuiet(t, a, reg, veth+"'s MTU changed")
		l.mustApply(t, a, fullState())
		if after := skips(t, reg); !maps.Equal(after, before) {
			t.Errorf("the Apply after %s changed, holding the node's address, skipped facilities: %v, then %v", veth, before, after)
		}
	}
	l.node.MustRun(t, "ip", "addr", "del", "198.51.100.77/24", "dev", "late0")
	changedThenQuiet(t, a, reg, "the node's address taken from a veth")
	l.mustApply(t, a, fullState())
	l.node.MustRun(t, "ip", "link", "set", "late0", "mtu", "1300")
	before := changedThenQuiet(t, a, reg, "late0's MTU changed again")
	l.mustApply(t, a, fullState())
	wantAllSkipped(t, before, skips(t, reg), "the Apply after a veth without the node's address changed")
}

// TestPrivilegedApplierRepeatIsSkipped: an Apply of the state the last one applied, nothing
// told of the kernel since, writes nothing, the classifier and attach included; a pod's
// interface coming, or a failure of the last Apply, makes the next one run them.
func TestPrivilegedApplierRepeatIsSkipped(t *testing.T) {
	privileged.Require(t)
	l, a, reg, base := dualStackApplier(t)
	both := []string{"classifier", "attach"}
	applied := func(what string, s *dataplane.State, wantFailed bool, skipped ...string) {
		t.Helper()
		before := skips(t, reg)
		if res := l.apply(t, a, s); (len(res.Failed) > 0) != wantFailed {
			t.Fatalf("%s: failed %v", what, res.Failed)
		}
		after := skips(t, reg)
		for _, f := range append(slices.Clone(sectioned), both...) {
			if want := slices.Contains(skipped, f); (after[f] == before[f]+1) != want {
				t.Errorf("%s: %s skipped %v times, want skipped %v", what, f, after[f]-before[f], want)
			}
		}
	}
	all := append(slices.Clone(sectioned), both...)
	applied("the state applied last, again", base, false, all...)
	podBehind(t, l, "pod8", "10.244.8.8/32")
	changedThenQuiet(t, a, reg, "a pod's interface came")
	applied("the Apply after a pod's interface came", base, false, sectioned...)
	applied("that state again", base, false, all...)
	failing := *base
	failing.Classifier.Pods = append(slices.Clip(base.Classifier.Pods), dataplane.Pod{Origin: dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "nowhere"},
		IPs: []netip.Addr{netip.MustParseAddr("10.244.77.77")}}) // faces no interface
	applied("a state with a pod behind no interface", &failing, true, sectioned...)
	applied("that state again", &failing, true, sectioned...)
	applied("the state without it", base, false, sectioned...)
	applied("that state again", base, false, all...)
}

// podBehind is a pod's namespace behind the node's veth name, with the node's host routes to
// dsts through it, as a routed CNI makes them.
func podBehind(t *testing.T, l *lab, name string, dsts ...string) *netns.NS {
	t.Helper()
	pod := netns.New(t, name)
	netns.Veth(t, l.node, name, pod, "eth0")
	for _, dst := range dsts {
		l.node.MustRun(t, "ip", "route", "add", dst, "dev", name)
	}
	return pod
}

// dualStackApplier is settledApplier with an IPv6 cluster network added to fullState (base),
// applied until its writes' events were no longer news.
func dualStackApplier(t *testing.T) (*lab, *kernel.Applier, *prometheus.Registry, *dataplane.State) {
	t.Helper()
	l, a, reg := settledApplier(t)
	base := fullState()
	base.Classifier.ClusterNetworks = append(base.Classifier.ClusterNetworks, netip.MustParsePrefix("fd00:10:244::/56"))
	l.mustApply(t, a, base)
	quiet(a)
	l.mustApply(t, a, base)
	quiet(a)
	return l, a, reg, base
}

// changedThenQuiet waits for a sync asked for after what, then until no more are, and returns
// the skips then.
func changedThenQuiet(t *testing.T, a *kernel.Applier, reg *prometheus.Registry, what string) map[string]float64 {
	t.Helper()
	select {
	case <-a.Changed():
	case <-time.After(5 * time.Second):
		t.Fatalf("no sync asked for after %s", what)
	}
	quiet(a)
	return skips(t, reg)
}

// settledApplier is an Applier of a new lab's node (a full pass an hour away) that applied
// fullState until its own writes' events were no longer news, and the registry of its metrics.
func settledApplier(t *testing.T) (*lab, *kernel.Applier, *prometheus.Registry) {
	t.Helper()
	l := newLab(t)
	a, reg := settle(t, l)
	return l, a, reg
}

// settle starts an applier in l, with fullState applied until its writes' events were no
// longer news.
func settle(t *testing.T, l *lab) (*kernel.Applier, *prometheus.Registry) {
	t.Helper()
	a := l.applierWith(t, kernel.Options{FullPass: time.Hour})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(a.Collectors()...)
	l.mustApply(t, a, fullState())
	quiet(a)
	l.mustApply(t, a, fullState()) // every facility: the first Apply's own events were news
	quiet(a)
	return a, reg
}

// wantAllSkipped: between the skips before and after, each sectioned facility skipped once.
func wantAllSkipped(t *testing.T, before, after map[string]float64, what string) {
	t.Helper()
	for _, f := range sectioned {
		if after[f] != before[f]+1 {
			t.Errorf("%s: %s skipped %v times, want once", what, f, after[f]-before[f])
		}
	}
}
