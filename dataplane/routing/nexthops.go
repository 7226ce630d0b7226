package routing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Attributes of nexthop messages (linux/nexthop.h) missing from x/sys/unix.
const (
	nhaFDB                     = 11
	nhaResGroup                = 12
	nhaResGroupBuckets         = 1
	nhaResGroupUnbalancedTimer = 3
	sizeofNhmsg                = 8
	sizeofNhGrp                = 8
	nhGroupMpath               = 0
	nhGroupRes                 = 1
	// groupBuckets is the size of egressd's resilient groups (the kernel's default): a flow's
	// hash picks a bucket, and a bucket keeps its member while both live.
	groupBuckets = 128
	// groupUnbalancedTimer (1 s, in the kernel's USER_HZ ticks) is how long a resilient group
	// stays unbalanced after a member joins before the buckets it is owed move to it, busy or
	// not (the idle timer, 120 s, would otherwise let a busy group keep a member empty).
	groupUnbalancedTimer = 100
)

// nexthop is a kernel nexthop object (`ip nexthop`): a gateway on a device, or a group of
// such objects. egressd makes one object per (gateway, device), shared by every group that
// uses it, and one group per ECMP route, replaced in place when its live members change.
//
// A route whose members are all BFD-gated gets a resilient group: a member leaving moves only
// its own flows (its buckets), a member joining takes only the buckets it is owed (after 1 s),
// and no flow moves between the others (stateful gateways keep their connections), as
// upstream asks of a gateway added or removed. Other routes keep a plain (hash-threshold)
// group: the kernel skips a member of such a group whose neighbour entry failed, the only
// failover a gateway without BFD has, and a resilient group does not.
type nexthop struct {
	id     uint32
	proto  uint8
	family uint8
	gw     netip.Addr
	oif    int
	onlink bool
	// group holds the member IDs (sorted) of a group; nil for a single nexthop.
	group []uint32
	// resilient: a group of the resilient type.
	resilient bool
	// other marks what egressd never writes (blackhole, encap, fdb, weights, other group
	// types): it never matches a wanted object.
	other bool
}

func nhmsg(family, proto uint8) header {
	h := make(header, sizeofNhmsg)
	h[0], h[2] = family, proto
	return h
}

// readNexthops returns every nexthop object of the namespace, whoever owns it: the IDs of all
// of them are taken.
func (c *rtnl) readNexthops() (map[uint32]nexthop, error) {
	msgs, err := c.dump(unix.RTM_GETNEXTHOP, unix.RTM_NEWNEXTHOP, nhmsg(unix.AF_UNSPEC, 0))
	if err != nil {
		return nil, fmt.Errorf("list nexthop objects: %w", err)
	}
	out := make(map[uint32]nexthop, len(msgs))
	for _, m := range msgs {
		nh, err := parseNexthop(m)
		if err != nil {
			return nil, err
		}
		out[nh.id] = nh
	}
	return out, nil
}

func parseNexthop(m []byte) (nexthop, error) {
	if len(m) < sizeofNhmsg {
		return nexthop{}, fmt.Errorf("short nexthop message (%d bytes)", len(m))
	}
	nh := nexthop{family: m[0], proto: m[2], onlink: binary.NativeEndian.Uint32(m[4:])&unix.RTNH_F_ONLINK != 0}
	attrs, err := nl.ParseRouteAttr(m[sizeofNhmsg:])
	if err != nil {
		return nexthop{}, fmt.Errorf("parse nexthop: %w", err)
	}
	for _, a := range attrs {
		v := a.Value
		switch a.Attr.Type {
		case unix.NHA_ID:
			nh.id = binary.NativeEndian.Uint32(v)
		case unix.NHA_OIF:
			nh.oif = int(binary.NativeEndian.Uint32(v))
		case unix.NHA_GATEWAY:
			nh.gw, _ = netip.AddrFromSlice(v)
		case unix.NHA_GROUP:
			for ; len(v) >= sizeofNhGrp; v = v[sizeofNhGrp:] {
				nh.group = append(nh.group, binary.NativeEndian.Uint32(v))
				if v[4] != 0 || v[5] != 0 { // weight-1, weight_high: egressd writes weight 1
					nh.other = true
				}
			}
			slices.Sort(nh.group)
		case unix.NHA_GROUP_TYPE:
			typ := binary.NativeEndian.Uint16(v)
			nh.resilient = typ == nhGroupRes
			nh.other = nh.other || (typ != nhGroupMpath && typ != nhGroupRes)
		case unix.NHA_BLACKHOLE, unix.NHA_ENCAP, unix.NHA_ENCAP_TYPE, nhaFDB:
			nh.other = true
		}
	}
	return nh, nil
}

// createMember creates the nexthop object id: gw (if valid) on device oif, onlink or not.
func (c *rtnl) createMember(id uint32, proto, family uint8, gw netip.Addr, oif int, onlink bool) error {
	attrs := []*nl.RtAttr{nl.NewRtAttr(unix.NHA_ID, u32(id)), nl.NewRtAttr(unix.NHA_OIF, u32(uint32(oif)))}
	if gw.IsValid() {
		attrs = append(attrs, nl.NewRtAttr(unix.NHA_GATEWAY, gw.AsSlice()))
	}
	h := nhmsg(family, proto)
	if onlink {
		binary.NativeEndian.PutUint32(h[4:], unix.RTNH_F_ONLINK)
	}
	if err := c.write(unix.RTM_NEWNEXTHOP, unix.NLM_F_CREATE|unix.NLM_F_EXCL, h, attrs...); err != nil {
		return fmt.Errorf("nexthop id %d via %s dev #%d: %w", id, gw, oif, err)
	}
	return nil
}

// writeGroup creates (replace false: exclusively) or replaces the group id with members, a
// resilient one or a plain one. Replacing a group changes the routes that use it at once, with
// no moment without a nexthop; the kernel keeps a group's type.
func (c *rtnl) writeGroup(id uint32, proto uint8, members []uint32, replace, resilient bool) error {
	grp := make([]byte, sizeofNhGrp*len(members))
	for i, m := range members {
		binary.NativeEndian.PutUint32(grp[i*sizeofNhGrp:], m) // weight 0 means 1
	}
	flags := unix.NLM_F_CREATE | unix.NLM_F_EXCL
	if replace {
		flags = unix.NLM_F_REPLACE
	}
	attrs := []*nl.RtAttr{nl.NewRtAttr(unix.NHA_ID, u32(id)), nl.NewRtAttr(unix.NHA_GROUP, grp)}
	if resilient {
		res := nl.NewRtAttr(unix.NLA_F_NESTED|nhaResGroup, nil)
		res.AddRtAttr(nhaResGroupBuckets, binary.NativeEndian.AppendUint16(nil, groupBuckets))
		res.AddRtAttr(nhaResGroupUnbalancedTimer, u32(groupUnbalancedTimer))
		attrs = append(attrs, nl.NewRtAttr(unix.NHA_GROUP_TYPE, binary.NativeEndian.AppendUint16(nil, nhGroupRes)), res)
	}
	err := c.write(unix.RTM_NEWNEXTHOP, flags, nhmsg(unix.AF_UNSPEC, proto), attrs...)
	if err != nil {
		return fmt.Errorf("nexthop group id %d members %v: %w", id, members, err)
	}
	return nil
}

func (c *rtnl) deleteNexthop(id uint32) error {
	err := c.write(unix.RTM_DELNEXTHOP, 0, nhmsg(unix.AF_UNSPEC, 0), nl.NewRtAttr(unix.NHA_ID, u32(id)))
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete nexthop id %d: %w", id, err)
	}
	return nil
}
