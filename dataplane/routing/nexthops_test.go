package routing

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// group is an NHA_GROUP attribute: struct nexthop_grp {id; weight; weight_high; resvd2} each.
func group(weights map[uint32]uint8, ids ...uint32) *nl.RtAttr {
	var b []byte
	for _, id := range ids {
		e := make([]byte, sizeofNhGrp)
		binary.NativeEndian.PutUint32(e, id)
		e[4] = weights[id]
		b = append(b, e...)
	}
	return nl.NewRtAttr(unix.NHA_GROUP, b)
}

func u16(v uint16) []byte { return binary.NativeEndian.AppendUint16(nil, v) }

// TestParseNexthop: a nexthop object reads back as egressd compares it with what it wants: its
// ID, owner, family, gateway, device and onlink flag; a group's members sorted and its type
// (resilient or not); and as other (never egressd's, so replaced) a weighted member, a group
// type egressd does not write, a blackhole, an encapsulation or an FDB nexthop.
func TestParseNexthop(t *testing.T) {
	onlink := nhmsg(unix.AF_INET, 229)
	binary.NativeEndian.PutUint32(onlink[4:], unix.RTNH_F_ONLINK)
	id := nl.NewRtAttr(unix.NHA_ID, u32(71000005))
	for _, tc := range []struct {
		name string
		m    []byte
		want nexthop
	}{
		{"gateway", message(nhmsg(unix.AF_INET6, 229), id, nl.NewRtAttr(unix.NHA_OIF, u32(3)),
			nl.NewRtAttr(unix.NHA_GATEWAY, netip.MustParseAddr("fd00::1").AsSlice())),
			nexthop{id: 71000005, proto: 229, family: unix.AF_INET6, gw: netip.MustParseAddr("fd00::1"), oif: 3}},
		{"onlink tunnel peer", message(onlink, id, nl.NewRtAttr(unix.NHA_OIF, u32(9)), nl.NewRtAttr(unix.NHA_GATEWAY, []byte{10, 1, 0, 1})),
			nexthop{id: 71000005, proto: 229, family: unix.AF_INET, gw: netip.MustParseAddr("10.1.0.1"), oif: 9, onlink: true}},
		{"group", message(nhmsg(unix.AF_UNSPEC, 229), id, group(nil, 71000003, 71000001), nl.NewRtAttr(unix.NHA_GROUP_TYPE, u16(nhGroupMpath))),
			nexthop{id: 71000005, proto: 229, group: []uint32{71000001, 71000003}}},
		{"resilient group", message(nhmsg(unix.AF_UNSPEC, 229), id, group(nil, 71000001), nl.NewRtAttr(unix.NHA_GROUP_TYPE, u16(nhGroupRes))),
			nexthop{id: 71000005, proto: 229, group: []uint32{71000001}, resilient: true}},
		{"weighted", message(nhmsg(unix.AF_UNSPEC, 3), id, group(map[uint32]uint8{71000001: 4}, 71000001, 71000002)),
			nexthop{id: 71000005, proto: 3, group: []uint32{71000001, 71000002}, other: true}},
		{"unknown group type", message(nhmsg(unix.AF_UNSPEC, 229), id, group(nil, 71000001), nl.NewRtAttr(unix.NHA_GROUP_TYPE, u16(7))),
			nexthop{id: 71000005, proto: 229, group: []uint32{71000001}, other: true}},
		{"blackhole", message(nhmsg(unix.AF_INET, 229), id, nl.NewRtAttr(unix.NHA_BLACKHOLE, nil)),
			nexthop{id: 71000005, proto: 229, family: unix.AF_INET, other: true}},
		{"fdb", message(nhmsg(unix.AF_INET, 229), id, nl.NewRtAttr(nhaFDB, nil)),
			nexthop{id: 71000005, proto: 229, family: unix.AF_INET, other: true}},
		{"encap", message(nhmsg(unix.AF_INET, 229), id, nl.NewRtAttr(unix.NHA_ENCAP_TYPE, u16(1))),
			nexthop{id: 71000005, proto: 229, family: unix.AF_INET, other: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseNexthop(tc.m)
			if err != nil || got.id != tc.want.id || got.proto != tc.want.proto || got.family != tc.want.family ||
				got.gw != tc.want.gw || got.oif != tc.want.oif || got.onlink != tc.want.onlink ||
				!slices.Equal(got.group, tc.want.group) || got.resilient != tc.want.resilient || got.other != tc.want.other {
				t.Errorf("parsed %+v (%v)\nwant   %+v", got, err, tc.want)
			}
		})
	}
	if _, err := parseNexthop(make([]byte, sizeofNhmsg-1)); err == nil {
		t.Error("a truncated message parsed")
	}
}

// TestNexthopIDs: egressd's objects are those stamped with its protocol (never ID 0); a new
// object takes the first ID from the base that no object of any owner uses, and never 0.
func TestNexthopIDs(t *testing.T) {
	k := &kernel{proto: 229, nexthops: map[uint32]nexthop{
		71000000: {id: 71000000, proto: 11}, // zebra's, in egressd's range
		71000001: {id: 71000001, proto: 229},
		71000003: {id: 71000003, proto: 229},
		0:        {proto: 229},
	}}
	if got := k.freeID(71000000); got != 71000002 {
		t.Errorf("free ID %d, want 71000002", got)
	}
	if got := (&kernel{}).freeID(0); got != 1 {
		t.Errorf("free ID from 0: %d, want 1", got)
	}
	for id, want := range map[uint32]bool{71000000: false, 71000001: true, 71000002: false, 0: false} {
		if _, ok := k.owned(id); ok != want {
			t.Errorf("owned(%d) = %v, want %v", id, ok, want)
		}
	}
}
