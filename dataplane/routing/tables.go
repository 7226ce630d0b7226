package routing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

const (
	sizeofRtmsg = 12
	rtaNHID     = 30 // RTA_NH_ID, missing from x/sys/unix
	// metricV6 is the metric the kernel gives IPv6 routes added without one; IPv4's is 0.
	metricV6 = 1024
)

// routeKey identifies a route in the kernel: a replace acts on the route with the same key.
type routeKey struct {
	table  uint32
	dst    netip.Prefix
	metric uint32
}

func keyOf(table uint32, dst netip.Prefix) routeKey {
	k := routeKey{table: table, dst: dst.Masked()}
	if dst.Addr().Is6() {
		k.metric = metricV6
	}
	return k
}

func (k routeKey) family() uint8 {
	if k.dst.Addr().Is6() {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

// kroute is a route of an egressd table, as written and as read back: a blackhole, a gateway
// on a device, or a nexthop object (group).
type kroute struct {
	key   routeKey
	proto uint8
	typ   uint8 // RTN_UNICAST, RTN_BLACKHOLE or RTN_THROW
	gw    netip.Addr
	oif   int
	src   netip.Addr
	nhid  uint32
	// onlink: gw is on oif without a route to it (a tunnel peer).
	onlink bool
	// other marks what egressd never writes (multipath without a nexthop object, gateways of
	// the other family): it never equals a wanted route, so Apply replaces it.
	other bool
}

// same reports whether the kernel's route have already is want.
func (want kroute) same(have kroute) bool {
	if have.other || want.typ != have.typ || want.src != have.src {
		return false
	}
	switch {
	case want.typ == unix.RTN_BLACKHOLE || want.typ == unix.RTN_THROW:
		return true // the kernel reports IPv6 ones on lo; nothing else to compare
	case want.nhid != 0 || have.nhid != 0:
		return want.nhid == have.nhid // the kernel may also expand the group's members
	}
	return want.gw == have.gw && want.oif == have.oif && want.onlink == have.onlink
}

func (k routeKey) rtmsg(proto, scope, typ uint8) header {
	h := make(header, sizeofRtmsg)
	h[0], h[1] = k.family(), uint8(k.dst.Bits())
	h[4] = unix.RT_TABLE_UNSPEC // the table is in RTA_TABLE: egressd's IDs need 32 bits
	h[5], h[6], h[7] = proto, scope, typ
	return h
}

func (k routeKey) attrs() []*nl.RtAttr {
	return []*nl.RtAttr{
		nl.NewRtAttr(unix.RTA_DST, k.dst.Addr().AsSlice()),
		nl.NewRtAttr(unix.RTA_TABLE, u32(k.table)),
		nl.NewRtAttr(unix.RTA_PRIORITY, u32(k.metric)),
	}
}

// readRoutes returns the routes stamped with proto in tables owns accepts. The dump is
// filtered by protocol in the kernel (strict checking), and again here.
func (c *rtnl) readRoutes(proto uint8, owns func(uint32) bool) ([]kroute, error) {
	var out []kroute
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		req := make(header, sizeofRtmsg)
		req[0], req[5] = fam, proto
		msgs, err := c.dump(unix.RTM_GETROUTE, unix.RTM_NEWROUTE, req)
		if err != nil {
			return nil, fmt.Errorf("list routes: %w", err)
		}
		for _, m := range msgs {
			r, err := parseRoute(m)
			if err != nil {
				return nil, err
			}
			if r.proto == proto && owns(r.key.table) {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

func parseRoute(m []byte) (kroute, error) {
	if len(m) < sizeofRtmsg {
		return kroute{}, fmt.Errorf("short route message (%d bytes)", len(m))
	}
	fam, bits := m[0], int(m[1])
	r := kroute{proto: m[5], typ: m[7], key: routeKey{table: uint32(m[4])}, onlink: binary.NativeEndian.Uint32(m[8:])&unix.RTNH_F_ONLINK != 0}
	attrs, err := nl.ParseRouteAttr(m[sizeofRtmsg:])
	if err != nil {
		return kroute{}, fmt.Errorf("parse route: %w", err)
	}
	dst := netip.IPv4Unspecified()
	if fam == unix.AF_INET6 {
		dst = netip.IPv6Unspecified()
	}
	multipath := false
	for _, a := range attrs {
		v := a.Value
		switch a.Attr.Type {
		case unix.RTA_TABLE:
			r.key.table = binary.NativeEndian.Uint32(v)
		case unix.RTA_DST:
			dst, _ = netip.AddrFromSlice(v)
		case unix.RTA_PRIORITY:
			r.key.metric = binary.NativeEndian.Uint32(v)
		case unix.RTA_GATEWAY:
			r.gw, _ = netip.AddrFromSlice(v)
		case unix.RTA_OIF:
			r.oif = int(binary.NativeEndian.Uint32(v))
		case unix.RTA_PREFSRC:
			r.src, _ = netip.AddrFromSlice(v)
		case rtaNHID:
			r.nhid = binary.NativeEndian.Uint32(v)
		case unix.RTA_MULTIPATH:
			multipath = true
		case unix.RTA_VIA, unix.RTA_ENCAP:
			r.other = true
		}
	}
	r.key.dst = netip.PrefixFrom(dst, bits)
	r.other = r.other || (multipath && r.nhid == 0)
	return r, nil
}

// writeRoute installs r: exclusively when egressd has no route with its key (so that a route
// of another owner is never overwritten: the kernel answers EEXIST), else by replacing egressd's
// route in place, so that traffic never sees the table without it.
func (c *rtnl) writeRoute(r kroute, replace bool) error {
	attrs := r.key.attrs()
	if r.src.IsValid() {
		attrs = append(attrs, nl.NewRtAttr(unix.RTA_PREFSRC, r.src.AsSlice()))
	}
	switch {
	case r.nhid != 0:
		attrs = append(attrs, nl.NewRtAttr(rtaNHID, u32(r.nhid)))
	case r.typ == unix.RTN_UNICAST:
		if r.gw.IsValid() {
			attrs = append(attrs, nl.NewRtAttr(unix.RTA_GATEWAY, r.gw.AsSlice()))
		}
		attrs = append(attrs, nl.NewRtAttr(unix.RTA_OIF, u32(uint32(r.oif))))
	}
	flags := unix.NLM_F_CREATE | unix.NLM_F_EXCL
	if replace {
		flags = unix.NLM_F_CREATE | unix.NLM_F_REPLACE
	}
	scope := uint8(unix.RT_SCOPE_UNIVERSE)
	if r.typ == unix.RTN_UNICAST && r.nhid == 0 && !r.gw.IsValid() {
		scope = unix.RT_SCOPE_LINK // a device without a gateway, as iproute2 adds it
	}
	h := r.key.rtmsg(r.proto, scope, r.typ)
	if r.onlink {
		binary.NativeEndian.PutUint32(h[8:], unix.RTNH_F_ONLINK)
	}
	err := c.write(unix.RTM_NEWROUTE, flags, h, attrs...)
	if errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("table %d already has a route to %s that egressd does not own", r.key.table, r.key.dst)
	}
	if err != nil {
		return fmt.Errorf("route %s table %d: %w", r.key.dst, r.key.table, err)
	}
	return nil
}

// deleteRoute removes egressd's route with key k: the protocol is part of the match, so a
// route of another owner with the same key stays.
func (c *rtnl) deleteRoute(k routeKey, proto uint8) error {
	err := c.write(unix.RTM_DELROUTE, 0, k.rtmsg(proto, unix.RT_SCOPE_NOWHERE, 0), k.attrs()...)
	if err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete route %s table %d: %w", k.dst, k.table, err)
	}
	return nil
}
