package routing

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedLinkTableCopiesTheInterfacesRoutes: a table that follows an egress address
// (RouteTable.LinkOf) holds the main table's routes through the interface holding it, with a
// default route through that interface when main has none, and follows main when its routes
// change; marked traffic then leaves through that interface, not main's default gateway (gw3).
// Without an interface holding the address, the table is a blackhole and the copy is pruned.
func TestPrivilegedLinkTableCopiesTheInterfacesRoutes(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	r := l.router(t)
	// An egress IP of each family on e1 (the secondary network), and a route of main through e1.
	l.r.Addr(t, "e1", "10.1.1.100/32", "fd01:1::100/128")
	if err := l.r.Script("ip route add 198.51.100.0/24 via 10.1.1.2 dev e1",
		"ip -6 route add default via fd01:1::2 dev e1 metric 500"); err != nil {
		t.Fatal(err)
	}
	o := dataplane.Origin{Kind: "EgressIP", Name: "eip"}
	state := &dataplane.RoutingState{
		Rules: []dataplane.RouteRule{{Origin: o, Priority: 10, Mark: 0x100, Mask: 0xff00, Table: 0},
			{Origin: o, Priority: 10, IPv6: true, Mark: 0x100, Mask: 0xff00, Table: 0}},
		Tables: []dataplane.RouteTable{{Origin: o, ID: 0,
			LinkOf: []netip.Addr{netip.MustParseAddr("10.1.1.100"), netip.MustParseAddr("fd01:1::100")}}},
	}
	apply := func() {
		t.Helper()
		s := r.WithLinkRoutes(state)
		if errs := r.Apply(s, nil); len(errs) != 0 {
			t.Fatal(errs)
		}
		if err := r.Prune(s); err != nil {
			t.Fatal(err)
		}
	}
	apply()
	expectIP(t, l, `default dev e1 proto 229 scope link
10.1.1.0/24 dev e1 proto 229 scope link
198.51.100.0/24 via 10.1.1.2 dev e1 proto 229`, "route", "show", "table", "7100")
	// egressctl's view: the default route on link names its interface.
	var seen Programmed
	if err := l.r.Do(func() (err error) { seen, err = Inspect(Config{}); return err }); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(seen.Routes, func(pr ProgrammedRoute) bool { return pr.Table == 7100 && pr.Dst.Bits() == 0 && pr.Dst.Addr().Is4() }); i < 0 || seen.Routes[i].Device != "e1" {
		t.Errorf("Inspect's routes %+v: want table 7100's IPv4 default route on e1", seen.Routes)
	}
	six := l.ip(t, "-6", "route", "show", "table", "7100")
	for _, want := range []string{"fd01:1::/64 dev e1 proto 229", "default via fd01:1::2 dev e1 proto 229"} {
		if !strings.Contains(six, want) {
			t.Errorf("IPv6 table 7100:\n%s\nwant a line with %q", six, want)
		}
	}
	if strings.Contains(six, "fd01:3::2") {
		t.Errorf("IPv6 table 7100 copied a route of another interface:\n%s", six)
	}
	var e1, e2 int
	if err := l.r.Do(func() error {
		a, err := r.h.LinkByName("e1")
		if err != nil {
			return err
		}
		b, err := r.h.LinkByName("e2")
		e1, e2 = a.Attrs().Index, b.Attrs().Index
		return err
	}); err != nil {
		t.Fatal(err)
	}
	const main = 254
	if !r.Copies(e1, main) || r.Copies(e2, main) || r.Copies(e1, 7100) {
		t.Errorf("Copies(e1, main)=%v Copies(e2, main)=%v Copies(e1, 7100)=%v, want true, false, false", r.Copies(e1, main), r.Copies(e2, main), r.Copies(e1, 7100))
	}
	// A strict reverse path filter on e1 drops the replies: reported, and no longer once loose.
	if err := l.r.Script("sysctl -qw net.ipv4.conf.all.rp_filter=0", "sysctl -qw net.ipv4.conf.e1.rp_filter=1"); err != nil {
		t.Fatal(err)
	}
	if got := l.strictReplyInterfaces(t, r); !slices.Equal(got, []string{"e1"}) {
		t.Errorf("ReplyInterfaces (strict) with e1 strict: %v, want [e1]", got)
	}
	if err := l.r.Script("sysctl -qw net.ipv4.conf.e1.rp_filter=2"); err != nil {
		t.Fatal(err)
	}
	// IPv6: main's default route is e1's here (metric 500), so its replies pass any check; once
	// it is e3's, they carry the table's mark through a firewall's check keyed by it.
	if got := l.replyInterfaces6(t, r); len(got) != 0 {
		t.Errorf("ReplyInterfaces6 with main's IPv6 default route through e1: %v, want none", got)
	}
	if err := l.r.Script("ip -6 route del default via fd01:1::2 dev e1 metric 500"); err != nil {
		t.Fatal(err)
	}
	if got := l.replyInterfaces6(t, r); !slices.Equal(got, []string{"e1+"}) {
		t.Errorf("ReplyInterfaces6: %v, want [e1+] (copied for an IPv6 egress IP: marked)", got)
	}
	if err := l.r.Script("ip -6 route add default via fd01:1::2 dev e1 metric 500"); err != nil {
		t.Fatal(err)
	}
	if got := l.strictReplyInterfaces(t, r); len(got) != 0 {
		t.Errorf("ReplyInterfaces (strict) with e1 loose: %v, want none", got)
	}
	for _, v6 := range []bool{false, true} {
		g1, _ := l.received(t, 1)
		g3, _ := l.received(t, 3)
		if v6 {
			_, g1 = l.received(t, 1)
			_, g3 = l.received(t, 3)
		}
		if !l.ping(t, v6, 0x100) {
			t.Errorf("v6=%v: a marked ping was not answered", v6)
		}
		n1, _ := l.received(t, 1)
		n3, _ := l.received(t, 3)
		if v6 {
			_, n1 = l.received(t, 1)
			_, n3 = l.received(t, 3)
		}
		if n1 != g1+1 || n3 != g3 {
			t.Errorf("v6=%v: a marked ping reached gw1 %d and gw3 %d times, want 1 and 0", v6, n1-g1, n3-g3)
		}
	}

	// Main gets a default route through e1 (behind gw3's): the copy takes its gateway.
	if err := l.r.Script("ip route add default via 10.1.1.2 dev e1 metric 500"); err != nil {
		t.Fatal(err)
	}
	apply()
	expectIP(t, l, `default via 10.1.1.2 dev e1 proto 229
10.1.1.0/24 dev e1 proto 229 scope link
198.51.100.0/24 via 10.1.1.2 dev e1 proto 229`, "route", "show", "table", "7100")

	// A multipath route through e1 alone is copied whole (a nexthop group); of one that also
	// goes through e2, the member through e1.
	if err := l.r.Script("ip route add 192.0.2.0/24 nexthop via 10.1.1.2 dev e1 nexthop via 10.1.1.3 dev e1",
		"ip route add 198.18.0.0/15 nexthop via 10.1.1.2 dev e1 nexthop via 10.1.2.2 dev e2"); err != nil {
		t.Fatal(err)
	}
	apply()
	table := l.ip(t, "route", "show", "table", "7100")
	if !strings.Contains(table, "nexthop via 10.1.1.2 dev e1 weight 1\n\tnexthop via 10.1.1.3 dev e1 weight 1") || !strings.Contains(table, "192.0.2.0/24 nhid") ||
		!strings.Contains(table, "198.18.0.0/15 via 10.1.1.2 dev e1 proto 229") {
		t.Errorf("table 7100 with multipath routes in main:\n%s\nwant 192.0.2.0/24 over both gateways of e1, 198.18.0.0/15 via e1's", table)
	}

	// e1 goes down (the kernel removes its routes, and its IPv6 addresses): the table becomes a
	// blackhole rather than let the marked traffic go on to main; up again, the copy is back.
	if err := l.r.Script("ip link set e1 down"); err != nil {
		t.Fatal(err)
	}
	apply()
	expectIP(t, l, "blackhole default proto 229", "route", "show", "table", "7100")
	expectIP(t, l, "blackhole default dev lo proto 229 metric 1024 pref medium", "-6", "route", "show", "table", "7100")
	// Any default route that cannot be written through a down interface leaves a blackhole.
	down := &dataplane.RoutingState{Tables: []dataplane.RouteTable{{Origin: o, ID: 1, Routes: []dataplane.Route{
		{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: &dataplane.Nexthop{Device: "e1"}}}}}}
	if errs := r.Apply(down, nil); errs[o] == nil {
		t.Error("a default route through a down interface was written without an error")
	}
	expectIP(t, l, "blackhole default proto 229", "route", "show", "table", "7101")
	if err := l.r.Script("ip link set e1 up"); err != nil {
		t.Fatal(err)
	}
	apply()
	expectIP(t, l, `default dev e1 proto 229 scope link
10.1.1.0/24 dev e1 proto 229 scope link
198.18.0.0/15 via 10.1.1.2 dev e1 proto 229`, "route", "show", "table", "7100")

	// The egress IP leaves e1 (moved to another node): drop, never main.
	if err := l.r.Script("ip addr del 10.1.1.100/32 dev e1"); err != nil {
		t.Fatal(err)
	}
	apply()
	expectIP(t, l, "blackhole default proto 229", "route", "show", "table", "7100")
	if r.Copies(e1, main) {
		t.Error("Copies(e1) after the address left it")
	}
}
