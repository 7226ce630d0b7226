package kernel

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// TestPodSideLinkEvents: a new or changed veth whose peer is in another namespace, named by no
// part of the state, with no address but link-local and cluster ones, is a pod's interface,
// whose event needs no full pass; anything else is news for every facility.
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
	k := &kernelEvents{addrsOf: func(l netlink.Link) ([]netlink.Addr, error) {
		if l.Attrs().Name == "broken" {
			return nil, errors.New("no answer")
		}
		var out []netlink.Addr
		for _, a := range addrs[l.Attrs().Name] {
			out = append(out, netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(a)}})
		}
		return out, nil
	}}
	event := func(typ uint16, l netlink.Link) netlink.LinkUpdate {
		u := netlink.LinkUpdate{Link: l}
		u.Header.Type = typ
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
		{"pod veth deleted", event(unix.RTM_DELLINK, veth("veth1", 3)), false},
		{"veth with its peer here", event(unix.RTM_NEWLINK, veth("veth1", -1)), false},
		{"a lab node's uplink, a veth with the node's address", event(unix.RTM_NEWLINK, veth("uplink", 0)), false},
		{"a veth an egress address names", event(unix.RTM_NEWLINK, veth("egress0", 3)), false},
		{"a veth a BFD session names", event(unix.RTM_NEWLINK, veth("bfd0", 3)), false},
		{"a veth a route's next hop names", event(unix.RTM_NEWLINK, veth("via0", 3)), false},
		{"a veth an ECMP member names", event(unix.RTM_NEWLINK, veth("ecmp0", 3)), false},
		{"addresses unknown", event(unix.RTM_NEWLINK, veth("broken", 3)), false},
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
	k.addrsOf = nil // the events' thread is not in the applier's namespace
	if k.podSide(cases[0].u) {
		t.Error("a pod's interface without a way to read its addresses in the right namespace")
	}
}
