package routing

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Routes of other tables than egressd's whose destination holds a gateway the Apply resolved
// (the one under way's included) may move it; others, and egressd's own, do not.
func TestResolves(t *testing.T) {
	r := &Router{cfg: DefaultConfig()}
	r.applying = map[netip.Addr]bool{}
	r.resolving(netip.MustParseAddr("192.0.2.2")) // an Apply under way
	r.resolving(netip.MustParseAddr("2001:db8::2"))
	route := func(table int, dst string) netlink.Route {
		_, n, err := net.ParseCIDR(dst)
		if err != nil {
			t.Fatal(err)
		}
		return netlink.Route{Table: table, Dst: n}
	}
	for _, c := range []struct {
		rt   netlink.Route
		want bool
	}{
		{route(unix.RT_TABLE_MAIN, "192.0.2.2/32"), true},
		{route(unix.RT_TABLE_MAIN, "192.0.2.0/24"), true},
		{route(unix.RT_TABLE_MAIN, "0.0.0.0/0"), true}, // the default route, as the library reports it
		{route(unix.RT_TABLE_LOCAL, "192.0.2.2/32"), true},
		{route(100, "2001:db8::/64"), true},
		{route(unix.RT_TABLE_MAIN, "198.18.7.0/24"), false},
		{route(unix.RT_TABLE_MAIN, "::/0"), true},
		{route(7101, "0.0.0.0/0"), false}, // egressd's own table
		{netlink.Route{Table: unix.RT_TABLE_MAIN}, false},
	} {
		if got := r.Resolves(c.rt); got != c.want {
			t.Errorf("Resolves(table %d, %v) = %v, want %v", c.rt.Table, c.rt.Dst, got, c.want)
		}
	}
	r.resolvedAll()
	r.applying = map[netip.Addr]bool{}
	r.resolvedAll() // the next Apply resolved no gateway
	if r.Resolves(route(unix.RT_TABLE_MAIN, "192.0.2.2/32")) {
		t.Error("a gateway the last Apply did not resolve still moves with its routes")
	}
}
