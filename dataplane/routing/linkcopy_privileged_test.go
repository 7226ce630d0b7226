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
	if !r.Copies(e1) || r.Copies(e2) {
		t.Errorf("Copies(e1)=%v Copies(e2)=%v, want true, false", r.Copies(e1), r.Copies(e2))
	}
	// A strict reverse path filter on e1 drops the replies: reported, and no longer once loose.
	strict := func() (out []string) {
		t.Helper()
		if err := l.r.Do(func() error { out = r.StrictRPFilter(); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if err := l.r.Script("sysctl -qw net.ipv4.conf.all.rp_filter=0", "sysctl -qw net.ipv4.conf.e1.rp_filter=1"); err != nil {
		t.Fatal(err)
	}
	if got := strict(); !slices.Equal(got, []string{"e1"}) {
		t.Errorf("StrictRPFilter with e1 strict: %v, want [e1]", got)
	}
	if err := l.r.Script("sysctl -qw net.ipv4.conf.e1.rp_filter=2"); err != nil {
		t.Fatal(err)
	}
	if got := strict(); len(got) != 0 {
		t.Errorf("StrictRPFilter with e1 loose: %v, want none", got)
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

	// The egress IPs leave e1 (moved to another node): drop, never main.
	if err := l.r.Script("ip addr del 10.1.1.100/32 dev e1", "ip addr del fd01:1::100/128 dev e1"); err != nil {
		t.Fatal(err)
	}
	apply()
	expectIP(t, l, "blackhole default proto 229", "route", "show", "table", "7100")
	expectIP(t, l, "blackhole default dev lo proto 229 metric 1024 pref medium", "-6", "route", "show", "table", "7100")
	if r.Copies(e1) {
		t.Error("Copies(e1) after the address left it")
	}
}
