package routing

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// TestSourceTable: an interface enslaved to a VRF has its routes in the VRF's table (upstream
// copies from there); any other, in main. (This machine's kernel has no VRF devices: the
// privileged tests cannot enslave one.)
func TestSourceTable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		master netlink.Link
		want   int
	}{
		{"no master", nil, 254},
		{"a VRF", &netlink.Vrf{Table: 1234}, 1234},
		{"a bridge", &netlink.Bridge{}, 254},
	} {
		if got := sourceTable(tc.master); got != tc.want {
			t.Errorf("%s: table %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestThroughLink: an egress IP's table copies, of each route of its interface's table, the
// nexthops through that interface: a gateway (onlink kept only with a gateway) or the device
// alone; of a multipath route only its members through the interface with a gateway (a
// group's members need one); routes through other interfaces give none.
func TestThroughLink(t *testing.T) {
	link := &netlink.LinkAttrs{Name: "eth1", Index: 4}
	gw, gw2 := net.ParseIP("192.0.2.1"), net.ParseIP("192.0.2.2")
	for _, tc := range []struct {
		name string
		r    netlink.Route
		want []dataplane.Nexthop
	}{
		{"gateway", netlink.Route{LinkIndex: 4, Gw: gw}, []dataplane.Nexthop{{Gateway: netip.MustParseAddr("192.0.2.1"), Device: "eth1"}}},
		{"onlink gateway", netlink.Route{LinkIndex: 4, Gw: gw, Flags: unix.RTNH_F_ONLINK},
			[]dataplane.Nexthop{{Gateway: netip.MustParseAddr("192.0.2.1"), Device: "eth1", Onlink: true}}},
		{"device", netlink.Route{LinkIndex: 4, Flags: unix.RTNH_F_ONLINK}, []dataplane.Nexthop{{Device: "eth1"}}},
		{"another interface", netlink.Route{LinkIndex: 2, Gw: gw}, nil},
		{"multipath", netlink.Route{MultiPath: []*netlink.NexthopInfo{{LinkIndex: 4, Gw: gw}, {LinkIndex: 2, Gw: gw2}, {LinkIndex: 4}, {LinkIndex: 4, Gw: gw2}}},
			[]dataplane.Nexthop{{Gateway: netip.MustParseAddr("192.0.2.1"), Device: "eth1"}, {Gateway: netip.MustParseAddr("192.0.2.2"), Device: "eth1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := throughLink(tc.r, link); !slices.Equal(got, tc.want) {
				t.Errorf("nexthops %+v, want %+v", got, tc.want)
			}
		})
	}
}
