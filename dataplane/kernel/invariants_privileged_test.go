package kernel_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/kernel"
)

// invariants checks, before every kernel write of an Apply and after it, what must hold of
// the kernel at every point in between.
type invariants struct {
	t       *testing.T
	l       *lab
	h       *netlink.Handle
	in      *classifier.Inspector
	adding  bool // SNAT and guards must be in place whenever the rule can route marked traffic
	nftOK   bool
	nftSeen bool // nftOK is up to date: no nft write since it was read
	broken  []string
}

func (l *lab) invariants(t *testing.T, adding bool) *invariants {
	t.Helper()
	h, err := vnetns.GetFromPath(l.node.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nh.Close)
	in, err := classifier.Inspect(l.root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	return &invariants{t: t, l: l, h: nh, in: in, adding: adding}
}

func (v *invariants) marked() bool {
	tr, err := v.in.Trace(podIP, dst, 17, udpPort)
	return err == nil && tr.Mark == mark
}

func (v *invariants) rule() bool {
	rules, err := v.h.RuleList(netlink.FAMILY_V4)
	return err == nil && slices.ContainsFunc(rules, func(r netlink.Rule) bool {
		return r.Priority == priority && r.Mark == mark && r.Table == table
	})
}

func (v *invariants) route() bool {
	routes, err := v.h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	return err == nil && slices.ContainsFunc(routes, func(r netlink.Route) bool { return r.Gw.Equal(extIP.AsSlice()) })
}

func (v *invariants) address() bool {
	addrs, err := v.h.AddrList(nil, netlink.FAMILY_V4)
	return err == nil && slices.ContainsFunc(addrs, func(a netlink.Addr) bool { return a.IP.Equal(egressIP.AsSlice()) })
}

func (v *invariants) nft() bool {
	if !v.nftSeen {
		out, _ := v.l.node.Run("nft", "list", "table", "inet", "egressd")
		els := elements(out)
		v.nftOK = els["egressip_snat4"] == "10.244.0.5 : 192.0.2.100" && els["egressip_guarded4"] == "10.244.0.5" &&
			els["egressip_steer_nexthops4"] == "0x00010000 . 192.0.2.2"
		v.nftSeen = true
	}
	return v.nftOK
}

// check looks at the kernel as it is now (before write, or at the end).
func (v *invariants) check(at string) {
	marked, rule, route := v.marked(), v.rule(), v.route()
	fail := func(what string) { v.broken = append(v.broken, at+": "+what) }
	if marked && !(rule && route) {
		fail(fmt.Sprintf("the pod's packets are marked but rule=%v table=%v", rule, route))
	}
	if rule && !route {
		fail("the rule selects an empty table")
	}
	if rule && !v.address() {
		fail("the rule routes marked traffic but the egress address is missing")
	}
	if v.adding && rule && !v.nft() {
		fail("the rule routes marked traffic but SNAT and the leak guards are not in place")
	}
}

func (v *invariants) before(w kernelWrite) {
	v.check("before " + w.String())
	if w.Kind == "nft" {
		v.nftSeen = false
	}
}

// tracedApply applies s with every write held until v has checked the kernel before it.
func (l *lab) tracedApply(t *testing.T, a *kernel.Applier, s *dataplane.State, v *invariants) ([]kernelWrite, dataplane.Result) {
	t.Helper()
	h, err := vnetns.GetFromPath(l.node.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var res dataplane.Result
	writes, err := watchWrites(func() error { return vnetns.Set(h) }, func() error {
		res = a.Apply(t.Context(), s)
		return nil
	}, v.before)
	if err != nil {
		t.Fatal(err)
	}
	v.check("after Apply")
	return writes, res
}

// ordered fails unless each named write kind first occurs after the previous one's last.
func ordered(t *testing.T, writes []kernelWrite, kinds ...string) {
	t.Helper()
	for i, k := range kinds {
		if firstIndex(writes, k) < 0 {
			t.Errorf("no %s write", k)
			continue
		}
		if i > 0 && firstIndex(writes, kinds[i-1]) >= 0 && lastIndex(writes, kinds[i-1]) > firstIndex(writes, k) {
			t.Errorf("%s written after %s: the phases are out of order", kinds[i-1], k)
		}
	}
}
