package kernel

import (
	"net"
	"net/netip"
	"testing"
	"testing/synctest"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/addresses"
	"github.com/egressd/egressd/dataplane/routing"
)

// TestPodSideLinkEvents: a new or changed veth, wherever its peer is, named by no part of the
// state, with no address but link-local and cluster ones, is a pod's interface, whose event
// needs no full pass; anything else is news for every facility.
func TestPodSideLinkEvents(t *testing.T) {
	nets := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")}
	state := &dataplane.State{
		Addresses: []dataplane.Address{{Interface: "egress0"}},
		BFD:       []dataplane.BFDPeer{{Interface: "bfd0"}},
		Routing: dataplane.RoutingState{Tables: []dataplane.RouteTable{{Routes: []dataplane.Route{
			{Via: &dataplane.Nexthop{Device: "via0"}},
			{Nexthops: []dataplane.Nexthop{{Device: "ecmp0"}, {}}},
		}}}},
	}
	addrs := map[string][]string{"pod2": {"fe80::1", "10.244.1.1", "fd00:10:244::1"}, "uplink": {"fe80::2", "192.0.2.5"}}
	k := &kernelEvents{router: &routing.Router{}, linkAddrs: map[int][]netip.Addr{}}
	index := int32(0)
	event := func(typ uint16, l netlink.Link) netlink.LinkUpdate {
		index++ // each case an interface of its own
		for _, a := range addrs[l.Attrs().Name] {
			k.noteAddress(addrUpdate(a, int(index), true))
		}
		u := netlink.LinkUpdate{Link: l}
		u.Header.Type, u.Index = typ, index
		return u
	}
	veth := func(name string, peerNS int) netlink.Link {
		return &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, NetNsID: peerNS}}
	}
	cases := []struct {
		name string
		u    netlink.LinkUpdate
		want bool
	}{
		{"new pod veth", event(unix.RTM_NEWLINK, veth("veth1", 3)), true},
		{"routed pod veth with its gateway addresses", event(unix.RTM_NEWLINK, veth("pod2", 3)), true},
		{"a veth deleted that was no pod's", event(unix.RTM_DELLINK, veth("veth1", 3)), false},
		{"a pod's veth made on the node, its peer not moved yet", event(unix.RTM_NEWLINK, veth("lxc1", -1)), true},
		{"a lab node's uplink, a veth with the node's address", event(unix.RTM_NEWLINK, veth("uplink", 0)), false},
		{"a veth an egress address names", event(unix.RTM_NEWLINK, veth("egress0", 3)), false},
		{"a veth a BFD session names", event(unix.RTM_NEWLINK, veth("bfd0", 3)), false},
		{"a veth a route's next hop names", event(unix.RTM_NEWLINK, veth("via0", 3)), false},
		{"a veth an ECMP member names", event(unix.RTM_NEWLINK, veth("ecmp0", 3)), false},
		{"a bridge", event(unix.RTM_NEWLINK, &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "cni0", NetNsID: -1}}), false},
		{"a tunnel device", event(unix.RTM_NEWLINK, &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "egressd-tun", NetNsID: -1}}), false},
	}
	for _, tc := range cases {
		if k.podSide(tc.u) {
			t.Errorf("%s: a pod's before any Apply said which interfaces are named", tc.name)
		}
	}
	k.podNetworks.Store(&nets)
	named := namedInterfaces(state)
	k.named.Store(&named)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := k.podSide(tc.u); got != tc.want {
				t.Errorf("podSide = %v, want %v", got, tc.want)
			}
		})
	}
	k.linkAddrs = nil // events lost: the addresses are not known
	if k.podSide(cases[0].u) {
		t.Error("a pod's interface while its addresses are not known")
	}
}

func addrUpdate(addr string, index int, added bool) netlink.AddrUpdate {
	ip := net.ParseIP(addr)
	return netlink.AddrUpdate{LinkAddress: net.IPNet{IP: ip, Mask: net.CIDRMask(len(ip)*8, len(ip)*8)}, LinkIndex: index, NewAddr: added}
}

// TestPodLinkLifecycle: once a pod's interface is known, its routes' events, the event of its
// peer gone (the pod's namespace torn down) and its deletion are a pod's too; a pod interface
// that gained an address outside the pods' side, or is named by the state, is the node's again.
func TestPodLinkLifecycle(t *testing.T) {
	nets := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	k := &kernelEvents{router: &routing.Router{}, linkAddrs: map[int][]netip.Addr{}}
	k.podNetworks.Store(&nets)
	named := map[string]bool{"egress0": true}
	k.named.Store(&named)
	event := func(typ uint16, index int32, name string, peerNS int) netlink.LinkUpdate {
		u := netlink.LinkUpdate{Link: &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, Index: int(index), NetNsID: peerNS}}}
		u.Header.Type, u.Index = typ, index
		return u
	}
	route := func(index int) netlink.Route {
		return netlink.Route{Table: unix.RT_TABLE_MAIN, LinkIndex: index, Dst: &net.IPNet{IP: net.ParseIP("10.244.0.7"), Mask: net.CIDRMask(32, 32)}}
	}
	check := func(what string, got, want bool) {
		t.Helper()
		if got != want {
			t.Errorf("%s: a pod's = %v, want %v", what, got, want)
		}
	}
	check("a route through an interface not seen yet", k.podRoute(route(7)), false)
	check("the pod's interface created", k.podSide(event(unix.RTM_NEWLINK, 7, "veth7", 3)), true)
	check("its host route", k.podRoute(route(7)), true)
	other := route(7)
	other.Table = 100
	check("its route in another table", k.podRoute(other), false)
	for _, dst := range []string{"0.0.0.0/0", "::/0", "10.244.0.0/15", "192.0.2.0/24"} {
		other = route(7)
		_, other.Dst, _ = net.ParseCIDR(dst)
		check("its route to "+dst, k.podRoute(other), false)
	}
	for _, dst := range []string{"10.244.3.0/24", "fe80::/64", "169.254.1.1/32"} {
		other = route(7)
		_, other.Dst, _ = net.ParseCIDR(dst)
		check("its route to "+dst, k.podRoute(other), true)
	}
	check("its peer gone", k.podSide(event(unix.RTM_NEWLINK, 7, "veth7", -1)), true)
	check("its deletion", k.podSide(event(unix.RTM_DELLINK, 7, "veth7", -1)), true)
	check("a route through it after its deletion", k.podRoute(route(7)), false)
	check("a deletion told twice", k.podSide(event(unix.RTM_DELLINK, 7, "veth7", -1)), false)
	check("a deleted veth that was never a pod's", k.podSide(event(unix.RTM_DELLINK, 8, "veth8", -1)), false)

	check("another pod's interface", k.podSide(event(unix.RTM_NEWLINK, 9, "veth9", 3)), true)
	k.noteAddress(addrUpdate("192.0.2.9", 9, true))
	check("it with the node's address", k.podSide(event(unix.RTM_NEWLINK, 9, "veth9", 3)), false)
	check("its routes then", k.podRoute(route(9)), false)
	check("its deletion then", k.podSide(event(unix.RTM_DELLINK, 9, "veth9", 3)), false)
	k.noteAddress(addrUpdate("192.0.2.11", 11, true))
	k.noteAddress(addrUpdate("fe80::11", 11, true))
	check("a veth with the node's address", k.podSide(event(unix.RTM_NEWLINK, 11, "veth11", 3)), false)
	k.noteAddress(addrUpdate("192.0.2.11", 11, false))
	check("it once the address is deleted", k.podSide(event(unix.RTM_NEWLINK, 11, "veth11", 3)), true)
	check("its deletion", k.podSide(event(unix.RTM_DELLINK, 11, "veth11", 3)), true)
	if len(k.linkAddrs) != 0 {
		t.Errorf("addresses kept of deleted interfaces: %v", k.linkAddrs)
	}

	check("a third pod's interface", k.podSide(event(unix.RTM_NEWLINK, 10, "egress1", 3)), true)
	named["egress1"] = true // an egress address put on it
	check("its deletion once the state names it", k.podSide(event(unix.RTM_DELLINK, 10, "egress1", 3)), false)
	if len(k.podLinks) != 0 {
		t.Errorf("interfaces remembered after their deletion: %v", k.podLinks)
	}
}

// TestPodEventsOnlyPoke: as consumed, a pod's interface's events, its host route's and its
// deletion ask for a sync without news; a default route through it, an address outside the
// pods' side taken from it, and its deletion after that are news for every facility.
func TestPodEventsOnlyPoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &events{links: make(chan netlink.LinkUpdate), addrs: make(chan netlink.AddrUpdate), routes: make(chan netlink.RouteUpdate),
			neighs: make(chan netlink.NeighUpdate), tcDeleted: make(chan int), lost: make(chan struct{})}
		nets := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
		named := map[string]bool{}
		pod := netip.MustParseAddr("10.244.0.7")
		var asked, poked int
		f := &facings{byAddr: map[netip.Addr]facing{}}
		done := make(chan struct{})
		k := &kernelEvents{facings: f, router: &routing.Router{}, addresses: &addressFacility{Addresses: &addresses.Addresses{}},
			ask: func() { asked++ }, poke: func() { poked++ }, done: done}
		k.linkAddrs = map[int][]netip.Addr{}
		k.podNetworks.Store(&nets)
		k.named.Store(&named)
		go k.consume(e)
		link := func(typ uint16) func() {
			return func() {
				u := netlink.LinkUpdate{Link: &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth7", Index: 7}}}
				u.Header.Type, u.Index = typ, 7
				e.links <- u
			}
		}
		route := func(dst *net.IPNet) func() {
			return func() {
				f.byAddr[pod] = facing{name: "veth7", index: 7} // the classifier found the pod behind it
				e.routes <- netlink.RouteUpdate{Type: unix.RTM_NEWROUTE, Route: netlink.Route{Table: unix.RT_TABLE_MAIN, LinkIndex: 7, Dst: dst}}
			}
		}
		step := func(what string, send func(), wantAsked, wantPoked int) {
			t.Helper()
			asked, poked = 0, 0
			send()
			synctest.Wait()
			if asked != wantAsked || poked != wantPoked {
				t.Errorf("%s: %d full syncs and %d pokes asked for, want %d and %d", what, asked, poked, wantAsked, wantPoked)
			}
		}
		step("the pod's interface created", link(unix.RTM_NEWLINK), 0, 1)
		step("its host route changed", route(&net.IPNet{IP: pod.AsSlice(), Mask: net.CIDRMask(32, 32)}), 0, 1)
		step("a default route through it", route(&net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}), 1, 0)
		step("its deletion", link(unix.RTM_DELLINK), 0, 1)
		step("a pod's interface again", link(unix.RTM_NEWLINK), 0, 1)
		step("the node's address taken from it", func() {
			e.addrs <- netlink.AddrUpdate{LinkAddress: net.IPNet{IP: net.ParseIP("192.0.2.5"), Mask: net.CIDRMask(24, 32)}, LinkIndex: 7}
		}, 1, 0)
		step("its deletion then", link(unix.RTM_DELLINK), 1, 0)
		close(done)
	})
}
