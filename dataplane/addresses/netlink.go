package addresses

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ifaProto is the IFA_PROTO attribute (Linux 5.18+): who added an address. vishvananda/netlink
// v1.3.1 neither sets nor reports it, so egressd speaks rtnetlink itself for addresses; without
// the stamp a restarted agent could not tell its addresses from the node's own.
const ifaProto = 11

// kaddr is an address as the kernel reports it.
type kaddr struct {
	prefix  netip.Prefix
	ifindex int
	proto   uint8
	scope   uint8
	flags   uint32
}

// dump lists every address of the current network namespace. A dump the kernel marks as
// interrupted (addresses changed while it ran) is taken again, so what is missing from the
// result is really absent.
func dump() ([]kaddr, error) {
	var err error
	for range 5 {
		req := nl.NewNetlinkRequest(unix.RTM_GETADDR, unix.NLM_F_DUMP)
		req.AddData(nl.NewIfAddrmsg(unix.AF_UNSPEC))
		var msgs [][]byte
		msgs, err = req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWADDR)
		if errors.Is(err, nl.ErrDumpInterrupted) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list addresses: %w", err)
		}
		out := make([]kaddr, 0, len(msgs))
		for _, m := range msgs {
			if k, ok := parse(m); ok {
				out = append(out, k)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("list addresses: %w", err)
}

// parse decodes one RTM_NEWADDR message. IFA_LOCAL is the address itself when present (IFA_ADDRESS
// is then the peer of a point-to-point link); IPv6 addresses usually carry only IFA_ADDRESS.
func parse(m []byte) (kaddr, bool) {
	if len(m) < unix.SizeofIfAddrmsg {
		return kaddr{}, false
	}
	msg := nl.DeserializeIfAddrmsg(m)
	attrs, err := nl.ParseRouteAttr(m[msg.Len():])
	if err != nil {
		return kaddr{}, false
	}
	k := kaddr{ifindex: int(msg.Index), scope: msg.Scope, flags: uint32(msg.Flags)}
	var local, address netip.Addr
	for _, a := range attrs {
		switch a.Attr.Type {
		case unix.IFA_LOCAL:
			local, _ = netip.AddrFromSlice(a.Value)
		case unix.IFA_ADDRESS:
			address, _ = netip.AddrFromSlice(a.Value)
		case unix.IFA_FLAGS:
			if len(a.Value) == 4 {
				k.flags = nl.NativeEndian().Uint32(a.Value)
			}
		case ifaProto:
			if len(a.Value) == 1 {
				k.proto = a.Value[0]
			}
		}
	}
	ip := local
	if !ip.IsValid() {
		ip = address
	}
	if !ip.IsValid() {
		return kaddr{}, false
	}
	k.prefix = netip.PrefixFrom(ip.Unmap(), int(msg.Prefixlen))
	return k, true
}

// add adds ip with host prefix length to interface ifindex: scope universe, valid and preferred
// for lifetime (0: forever), stamped with proto, and for IPv6 without duplicate address
// detection (the address must answer at once, and the cluster has made sure it is unique).
func add(ip netip.Addr, ifindex int, proto uint8, lifetime time.Duration) error {
	return newaddr(ip, ifindex, proto, lifetime, unix.NLM_F_CREATE|unix.NLM_F_EXCL, nil)
}

// renew gives existing addresses a fresh lifetime, over one netlink socket: an egress node
// renews its hundred addresses every few seconds, and a socket per request was most of the cost.
func renew(ks []kaddr, proto uint8, lifetime time.Duration) error {
	if len(ks) == 0 {
		return nil
	}
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	sh := &nl.SocketHandle{Socket: s}
	defer sh.Close()
	if err := errors.Join(s.SetSendTimeout(&nl.SocketTimeoutTv), s.SetReceiveTimeout(&nl.SocketTimeoutTv)); err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	sockets := map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: sh}
	var errs []error
	for _, k := range ks {
		errs = append(errs, newaddr(k.prefix.Addr(), k.ifindex, proto, lifetime, unix.NLM_F_REPLACE, sockets))
	}
	return errors.Join(errs...)
}

// newaddr sends RTM_NEWADDR with flags over sockets (nil: a socket of its own).
func newaddr(ip netip.Addr, ifindex int, proto uint8, lifetime time.Duration, flags int, sockets map[int]*nl.SocketHandle) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWADDR, flags|unix.NLM_F_ACK)
	req.Sockets = sockets
	msg := addrmsg(ip, ifindex)
	msg.Scope = unix.RT_SCOPE_UNIVERSE
	if ip.Is6() {
		msg.Flags = unix.IFA_F_NODAD
	}
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFA_LOCAL, ip.AsSlice()))
	req.AddData(nl.NewRtAttr(unix.IFA_ADDRESS, ip.AsSlice()))
	lft := uint32(0xffffffff) // forever
	if lifetime > 0 {
		lft = uint32(lifetime.Seconds())
	}
	info := nl.IfaCacheInfo{IfaCacheinfo: unix.IfaCacheinfo{Prefered: lft, Valid: lft}}
	req.AddData(nl.NewRtAttr(unix.IFA_CACHEINFO, info.Serialize()))
	req.AddData(nl.NewRtAttr(ifaProto, []byte{proto}))
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// del removes one address.
func del(k kaddr) error {
	req := nl.NewNetlinkRequest(unix.RTM_DELADDR, unix.NLM_F_ACK)
	msg := addrmsg(k.prefix.Addr(), k.ifindex)
	msg.Prefixlen = uint8(k.prefix.Bits())
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFA_LOCAL, k.prefix.Addr().AsSlice()))
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// addrmsg is the header of a request about ip, with host prefix length, on ifindex.
func addrmsg(ip netip.Addr, ifindex int) *nl.IfAddrmsg {
	family := unix.AF_INET
	if ip.Is6() {
		family = unix.AF_INET6
	}
	msg := nl.NewIfAddrmsg(family)
	msg.Prefixlen = uint8(ip.BitLen())
	msg.Index = uint32(ifindex)
	return msg
}
