package routing

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// message is a netlink payload: a fixed header, then attributes.
func message(h header, attrs ...*nl.RtAttr) []byte {
	b := append([]byte(nil), h...)
	for _, a := range attrs {
		b = append(b, a.Serialize()...)
	}
	return b
}

// TestParseRoute: a route of egressd's tables reads back with its table (the 32-bit attribute,
// else the header's byte), destination (the default route when the kernel sends none),
// metric, gateway, device, source, nexthop object and onlink flag; what egressd never writes
// (multipath without a nexthop object, a gateway of the other family, an encapsulation) is
// marked other, and a truncated message is an error.
func TestParseRoute(t *testing.T) {
	v4 := keyOf(7100, netip.MustParsePrefix("192.0.2.0/24"))
	onlink := v4.rtmsg(229, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST)
	binary.NativeEndian.PutUint32(onlink[8:], unix.RTNH_F_ONLINK)
	noDst := make(header, sizeofRtmsg)
	noDst[0], noDst[4], noDst[5], noDst[7] = unix.AF_INET6, 100, 229, unix.RTN_BLACKHOLE
	for _, tc := range []struct {
		name string
		m    []byte
		want kroute
	}{
		{"gateway", message(v4.rtmsg(229, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST), append(v4.attrs(),
			nl.NewRtAttr(unix.RTA_GATEWAY, []byte{10, 0, 0, 1}), nl.NewRtAttr(unix.RTA_OIF, u32(3)),
			nl.NewRtAttr(unix.RTA_PREFSRC, []byte{192, 0, 2, 10}))...),
			kroute{key: v4, proto: 229, typ: unix.RTN_UNICAST, gw: netip.MustParseAddr("10.0.0.1"), oif: 3, src: netip.MustParseAddr("192.0.2.10")}},
		{"onlink", message(onlink, append(v4.attrs(), nl.NewRtAttr(unix.RTA_GATEWAY, []byte{10, 0, 0, 1}), nl.NewRtAttr(unix.RTA_OIF, u32(9)))...),
			kroute{key: v4, proto: 229, typ: unix.RTN_UNICAST, gw: netip.MustParseAddr("10.0.0.1"), oif: 9, onlink: true}},
		{"group", message(v4.rtmsg(229, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST), append(v4.attrs(),
			nl.NewRtAttr(rtaNHID, u32(71000002)), nl.NewRtAttr(unix.RTA_MULTIPATH, nil))...),
			kroute{key: v4, proto: 229, typ: unix.RTN_UNICAST, nhid: 71000002}},
		{"IPv6 default blackhole, small table", message(noDst, nl.NewRtAttr(unix.RTA_PRIORITY, u32(metricV6))),
			kroute{key: routeKey{table: 100, dst: netip.MustParsePrefix("::/0"), metric: metricV6}, proto: 229, typ: unix.RTN_BLACKHOLE}},
		{"multipath", message(v4.rtmsg(229, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST), append(v4.attrs(), nl.NewRtAttr(unix.RTA_MULTIPATH, nil))...),
			kroute{key: v4, proto: 229, typ: unix.RTN_UNICAST, other: true}},
		{"IPv6 gateway", message(v4.rtmsg(229, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST), append(v4.attrs(), nl.NewRtAttr(unix.RTA_VIA, []byte{10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}))...),
			kroute{key: v4, proto: 229, typ: unix.RTN_UNICAST, other: true}},
		{"encap", message(v4.rtmsg(229, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST), append(v4.attrs(), nl.NewRtAttr(unix.RTA_ENCAP, nil))...),
			kroute{key: v4, proto: 229, typ: unix.RTN_UNICAST, other: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRoute(tc.m)
			if err != nil || got != tc.want {
				t.Errorf("parsed %+v (%v)\nwant   %+v", got, err, tc.want)
			}
		})
	}
	if _, err := parseRoute(make([]byte, sizeofRtmsg-1)); err == nil {
		t.Error("a truncated message parsed")
	}
}

// TestRouteSame: a route already in the kernel is left alone when it is the one wanted: a
// blackhole or throw of the same source whatever device the kernel reports it on, a route
// through the same nexthop object whatever members the kernel expands, a gateway route through
// the same gateway, device and onlink flag; anything else, and what egressd never writes, is
// replaced.
func TestRouteSame(t *testing.T) {
	gw, gw2 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	src := netip.MustParseAddr("192.0.2.10")
	via := kroute{typ: unix.RTN_UNICAST, gw: gw, oif: 3}
	with := func(r kroute, f func(*kroute)) kroute { f(&r); return r }
	for _, tc := range []struct {
		name       string
		want, have kroute
		same       bool
	}{
		{"same gateway", via, via, true},
		{"blackhole on lo", kroute{typ: unix.RTN_BLACKHOLE}, kroute{typ: unix.RTN_BLACKHOLE, oif: 1}, true},
		{"throw", kroute{typ: unix.RTN_THROW}, kroute{typ: unix.RTN_THROW, oif: 1}, true},
		{"group expanded", kroute{typ: unix.RTN_UNICAST, nhid: 7}, kroute{typ: unix.RTN_UNICAST, nhid: 7, gw: gw, oif: 3}, true},
		{"another group", kroute{typ: unix.RTN_UNICAST, nhid: 7}, kroute{typ: unix.RTN_UNICAST, nhid: 8}, false},
		{"group wanted, gateway there", kroute{typ: unix.RTN_UNICAST, nhid: 7}, via, false},
		{"gateway wanted, group there", via, with(via, func(r *kroute) { r.nhid = 7 }), false},
		{"another gateway", via, with(via, func(r *kroute) { r.gw = gw2 }), false},
		{"another device", via, with(via, func(r *kroute) { r.oif = 4 }), false},
		{"onlink lost", with(via, func(r *kroute) { r.onlink = true }), via, false},
		{"another source", with(via, func(r *kroute) { r.src = src }), via, false},
		{"blackhole wanted", kroute{typ: unix.RTN_BLACKHOLE}, via, false},
		{"another owner's multipath", via, with(via, func(r *kroute) { r.other = true }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.want.same(tc.have); got != tc.same {
				t.Errorf("same = %v, want %v", got, tc.same)
			}
		})
	}
}
