package addresses

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// addrMessage is an RTM_NEWADDR payload as the kernel dumps it.
func addrMessage(family int, prefixlen uint8, ifindex int, attrs ...*nl.RtAttr) []byte {
	msg := nl.NewIfAddrmsg(family)
	msg.Prefixlen, msg.Index, msg.Scope, msg.Flags = prefixlen, uint32(ifindex), unix.RT_SCOPE_UNIVERSE, unix.IFA_F_PERMANENT
	b := msg.Serialize()
	for _, a := range attrs {
		b = append(b, a.Serialize()...)
	}
	return b
}

// TestParseAddress: an address reads as its own (IFA_LOCAL, not the peer IFA_ADDRESS of a
// point-to-point link; IFA_ADDRESS when alone, as IPv6 sends it) with its prefix length,
// interface, scope, 32-bit flags and egressd's stamp (IFA_PROTO); a message without an address,
// or too short, is skipped.
func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    []byte
		want kaddr
		ok   bool
	}{
		{"stamped IPv4", addrMessage(unix.AF_INET, 32, 3, nl.NewRtAttr(unix.IFA_LOCAL, []byte{192, 0, 2, 10}),
			nl.NewRtAttr(unix.IFA_ADDRESS, []byte{192, 0, 2, 10}), nl.NewRtAttr(ifaProto, []byte{229})),
			kaddr{prefix: netip.MustParsePrefix("192.0.2.10/32"), ifindex: 3, proto: 229, flags: unix.IFA_F_PERMANENT}, true},
		{"point-to-point", addrMessage(unix.AF_INET, 32, 4, nl.NewRtAttr(unix.IFA_ADDRESS, []byte{10, 0, 0, 2}),
			nl.NewRtAttr(unix.IFA_LOCAL, []byte{10, 0, 0, 1})),
			kaddr{prefix: netip.MustParsePrefix("10.0.0.1/32"), ifindex: 4, flags: unix.IFA_F_PERMANENT}, true},
		{"IPv6, 32-bit flags", addrMessage(unix.AF_INET6, 64, 5, nl.NewRtAttr(unix.IFA_ADDRESS, netip.MustParseAddr("2001:db8::5").AsSlice()),
			nl.NewRtAttr(unix.IFA_FLAGS, nl.Uint32Attr(unix.IFA_F_NODAD|unix.IFA_F_NOPREFIXROUTE))),
			kaddr{prefix: netip.MustParsePrefix("2001:db8::5/64"), ifindex: 5, flags: unix.IFA_F_NODAD | unix.IFA_F_NOPREFIXROUTE}, true},
		{"no address", addrMessage(unix.AF_INET, 24, 3, nl.NewRtAttr(ifaProto, []byte{229})), kaddr{}, false},
		{"short", make([]byte, unix.SizeofIfAddrmsg-1), kaddr{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parse(tc.m)
			if ok != tc.ok || got != tc.want {
				t.Errorf("parse = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestHoldsAsLastPublished: an address event is egressd's own doing when egressd holds that
// address on that interface, as of the last call that ended: the stamped addresses of a
// listing (others are the node's), compared IPv4-mapped or not; a change not yet published
// does not count.
func TestHoldsAsLastPublished(t *testing.T) {
	a := &Addresses{protocol: 229, owned: map[netip.Addr]int{}}
	a.see([]kaddr{
		{prefix: netip.MustParsePrefix("192.0.2.10/32"), ifindex: 3, proto: 229},
		{prefix: netip.MustParsePrefix("192.0.2.1/24"), ifindex: 3},
		{prefix: netip.MustParsePrefix("2001:db8::10/128"), ifindex: 4, proto: 229},
		{prefix: netip.MustParsePrefix("10.0.0.1/8"), ifindex: 5, proto: 85},
	})
	a.publish()
	for _, tc := range []struct {
		ip      string
		ifindex int
		want    bool
	}{
		{"192.0.2.10", 3, true}, {"::ffff:192.0.2.10", 3, true}, {"2001:db8::10", 4, true},
		{"192.0.2.10", 4, false}, {"192.0.2.1", 3, false}, {"10.0.0.1", 5, false},
	} {
		if got := a.Holds(netip.MustParseAddr(tc.ip), tc.ifindex); got != tc.want {
			t.Errorf("Holds(%s, %d) = %v, want %v", tc.ip, tc.ifindex, got, tc.want)
		}
	}
	if want := []netip.Prefix{netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("10.0.0.1/8")}; !slices.Equal(a.Others(), want) {
		t.Errorf("the node's own addresses %v, want %v", a.Others(), want)
	}
	a.owned[netip.MustParseAddr("192.0.2.11")] = 3
	if a.Holds(netip.MustParseAddr("192.0.2.11"), 3) {
		t.Error("an address not yet published is held")
	}
}

// TestValidEgressAddress: only a global unicast address without a zone can be an egress
// address: not unspecified, loopback, link-local, multicast nor a scoped one.
func TestValidEgressAddress(t *testing.T) {
	for ip, ok := range map[string]bool{
		"192.0.2.10": true, "2001:db8::10": true, "10.1.2.3": true,
		"0.0.0.0": false, "127.0.0.1": false, "169.254.0.5": false, "fe80::1": false, "ff02::1": false,
		"224.0.0.5": false, "255.255.255.255": false, "2001:db8::10%eth0": false,
	} {
		if err := valid(netip.MustParseAddr(ip)); (err == nil) != ok {
			t.Errorf("valid(%s) = %v, want ok %v", ip, err, ok)
		}
	}
	if valid(netip.Addr{}) == nil {
		t.Error("the zero address is valid")
	}
}
