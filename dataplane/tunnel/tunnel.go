// Package tunnel programs egressd's VXLAN tunnel (dataplane.TunnelState): one device,
// dataplane.TunnelDevice, that carries steered packets to egress nodes across an underlay that
// drops a packet with a pod's source (a routed fabric, a cloud's source/destination check).
//
// The device has its own VNI and UDP port (Config), learns nothing, and takes its MAC from the
// node's underlay address (dataplane.TunnelMAC), so a node knows every peer's MAC without
// exchanging anything: per peer, one forwarding entry (the peer's MAC -> its underlay address)
// and one permanent neighbour entry per next-hop address of the peer (address -> the peer's
// MAC). Routes then go `via <peer's IPv4 address> dev egressd-vxlan onlink` and
// `via <dataplane.TunnelGateway6> dev egressd-vxlan`. The egress node's own device
// decapsulates, and the packet is forwarded and SNATed as one that arrived directly.
//
// What egressd owns is found in the kernel by the device's name: the device, and every
// forwarding entry and permanent neighbour entry on it. A restarted agent adopts them as they
// are. Apply installs and changes, never removes; Prune removes (after the routes that use it).
package tunnel

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/rpfilter"
)

// Defaults of Config: a UDP port and VNI of no CNI egressd knows of (flannel and Cilium use
// port 8472 and VNI 1 or security identities, Calico, Antrea and NSX 4789 with VNI 4096 or
// 4096+, 4790 is VXLAN-GPE, 4791 RoCEv2, Geneve 6081): a node running any of them receives
// egressd's frames on a socket of its own.
const (
	DefaultPort = 4799
	DefaultVNI  = 229 // egressd's route protocol number, for recognition in captures
)

// Config is the tunnel's identity on the wire; every node of a cluster must use the same.
type Config struct {
	VNI  uint32
	Port uint16
}

func (c Config) withDefaults() Config {
	if c.VNI == 0 {
		c.VNI = DefaultVNI
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	return c
}

// Validate checks the configuration's ranges.
func (c Config) Validate() error {
	if c.VNI >= 1<<24 {
		return fmt.Errorf("VXLAN VNI %d does not fit in 24 bits", c.VNI)
	}
	return nil
}

// Tunnel programs the tunnel of the network namespace it was created in.
type Tunnel struct {
	cfg Config
	h   *netlink.Handle
}

// New opens the network namespace of the calling thread.
func New(cfg Config) (*Tunnel, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	return &Tunnel{cfg: cfg, h: h}, nil
}

// Close releases the netlink socket; the kernel objects stay.
func (t *Tunnel) Close() { t.h.Close() }

// Apply makes the kernel hold everything s wants; a repeated Apply writes nothing. No Local
// means no tunnel: nothing is installed (Prune removes the device).
func (t *Tunnel) Apply(s *dataplane.TunnelState) map[dataplane.Origin]error {
	errs := map[dataplane.Origin]error{}
	if !s.Local.IsValid() {
		return errs
	}
	fail := func(o dataplane.Origin, err error) { errs[o] = errors.Join(errs[o], err) }
	link, err := t.device(s.Local)
	if err != nil {
		fail(s.Origin, err)
		for _, p := range s.Peers {
			fail(p.Origin, err)
		}
		return errs
	}
	k, err := t.read(link)
	if err != nil {
		fail(s.Origin, err)
		return errs
	}
	for _, p := range planPeers(s) {
		if p.err != nil {
			fail(p.Origin, p.err)
			continue
		}
		mac := p.mac
		if !k.fdb[fdbKey{mac.String(), p.Underlay}] {
			if err := t.h.NeighSet(fdbEntry(link, mac, p.Underlay)); err != nil {
				fail(p.Origin, fmt.Errorf("forwarding entry %s dst %s on %s: %w", mac, p.Underlay, dataplane.TunnelDevice, err))
				continue
			}
		}
		for _, nh := range p.Nexthops {
			if k.neigh[nh] == mac.String() {
				continue
			}
			if err := t.h.NeighSet(neighEntry(link, nh, mac)); err != nil {
				fail(p.Origin, fmt.Errorf("neighbour %s lladdr %s on %s: %w", nh, mac, dataplane.TunnelDevice, err))
			}
		}
	}
	return errs
}

// plannedPeer is a peer and the MAC its forwarding and neighbour entries name, or why it can
// have none.
type plannedPeer struct {
	dataplane.TunnelPeer
	mac net.HardwareAddr
	err error
}

// planPeers gives each peer of s, in order, its MAC, refusing a peer of the other family than
// the local underlay address and one whose MAC is an earlier peer's.
func planPeers(s *dataplane.TunnelState) []plannedPeer {
	var out []plannedPeer
	macs := map[string]netip.Addr{}
	for _, p := range s.Peers {
		if p.Underlay.Is4() != s.Local.Is4() {
			out = append(out, plannedPeer{TunnelPeer: p, err: fmt.Errorf("tunnel peer %s: not of the family of the local underlay address %s", p.Underlay, s.Local)})
			continue
		}
		mac := dataplane.TunnelMAC(p.Underlay)
		if other, ok := macs[mac.String()]; ok && other != p.Underlay {
			out = append(out, plannedPeer{TunnelPeer: p, err: fmt.Errorf("tunnel peer %s: MAC %s is also %s's", p.Underlay, mac, other)})
			continue
		}
		macs[mac.String()] = p.Underlay
		out = append(out, plannedPeer{TunnelPeer: p, mac: mac})
	}
	return out
}

// Prune removes what s no longer wants: the whole device when there is no Local, else the
// forwarding and neighbour entries of peers gone.
func (t *Tunnel) Prune(s *dataplane.TunnelState) error {
	link, err := t.h.LinkByName(dataplane.TunnelDevice)
	if errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("find %s: %w", dataplane.TunnelDevice, err)
	}
	if !s.Local.IsValid() {
		if err := t.h.LinkDel(link); err != nil {
			return fmt.Errorf("delete %s: %w", dataplane.TunnelDevice, err)
		}
		return nil
	}
	k, err := t.read(link)
	if err != nil {
		return err
	}
	fdb := map[fdbKey]bool{}
	neigh := map[netip.Addr]string{}
	for _, p := range s.Peers {
		mac := dataplane.TunnelMAC(p.Underlay).String()
		fdb[fdbKey{mac, p.Underlay}] = true
		for _, nh := range p.Nexthops {
			neigh[nh] = mac
		}
	}
	var errs []error
	for key := range k.fdb {
		if fdb[key] {
			continue
		}
		mac, _ := net.ParseMAC(key.mac)
		if err := t.h.NeighDel(fdbEntry(link, mac, key.dst)); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete forwarding entry %s dst %s on %s: %w", key.mac, key.dst, dataplane.TunnelDevice, err))
		}
	}
	for ip, mac := range k.neigh {
		if neigh[ip] == mac {
			continue
		}
		if err := t.h.NeighDel(neighEntry(link, ip, nil)); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete neighbour %s on %s: %w", ip, dataplane.TunnelDevice, err))
		}
	}
	return errors.Join(errs...)
}

// Cleanup removes the tunnel device of the calling thread's network namespace, and with it
// every entry on it (`egressctl cleanup`).
func Cleanup() error {
	link, err := netlink.LinkByName(dataplane.TunnelDevice)
	if errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("find %s: %w", dataplane.TunnelDevice, err)
	}
	if err := netlink.LinkDel(link); err != nil {
		return fmt.Errorf("delete %s: %w", dataplane.TunnelDevice, err)
	}
	return nil
}

// tosInherit copies the inner packet's DSCP (EgressQoS's) to the outer header, so that the
// fabric's QoS sees it as it would see a directly routed packet.
const tosInherit = 1

// device returns the tunnel device for the underlay address local, creating it, or replacing
// one whose identity (VNI, port, local address, learning, TOS) differs: a changed
// configuration or a node whose address changed.
func (t *Tunnel) device(local netip.Addr) (netlink.Link, error) {
	mac := dataplane.TunnelMAC(local)
	l, err := t.h.LinkByName(dataplane.TunnelDevice)
	switch {
	case errors.As(err, new(netlink.LinkNotFoundError)):
		l = nil
	case err != nil:
		return nil, fmt.Errorf("find %s: %w", dataplane.TunnelDevice, err)
	}
	if l != nil {
		vx, ok := l.(*netlink.Vxlan)
		if !ok {
			return nil, fmt.Errorf("%s exists and is a %s device, not egressd's VXLAN device", dataplane.TunnelDevice, l.Type())
		}
		local2, _ := netip.AddrFromSlice(vx.SrcAddr)
		if vx.VxlanId != int(t.cfg.VNI) || vx.Port != int(t.cfg.Port) || local2.Unmap() != local || vx.Learning || vx.TOS != tosInherit {
			if err := t.h.LinkDel(l); err != nil {
				return nil, fmt.Errorf("replace %s (vni %d port %d local %s): %w", dataplane.TunnelDevice, vx.VxlanId, vx.Port, local2, err)
			}
			l = nil
		}
	}
	if l == nil {
		vx := &netlink.Vxlan{
			LinkAttrs: netlink.LinkAttrs{Name: dataplane.TunnelDevice, HardwareAddr: mac},
			VxlanId:   int(t.cfg.VNI),
			SrcAddr:   local.AsSlice(),
			Port:      int(t.cfg.Port),
			Learning:  false,
			TOS:       tosInherit,
		}
		// On the interface of the underlay address: the kernel sizes the MTU from it.
		if idx, err := t.underlayLink(local); err == nil {
			vx.VtepDevIndex = idx
		}
		if err := t.h.LinkAdd(vx); err != nil {
			return nil, fmt.Errorf("create %s (vxlan id %d dstport %d local %s): %w", dataplane.TunnelDevice, t.cfg.VNI, t.cfg.Port, local, err)
		}
		if l, err = t.h.LinkByName(dataplane.TunnelDevice); err != nil {
			return nil, fmt.Errorf("find %s after creating it: %w", dataplane.TunnelDevice, err)
		}
	}
	if l.Attrs().HardwareAddr.String() != mac.String() {
		if err := t.h.LinkSetHardwareAddr(l, mac); err != nil {
			return nil, fmt.Errorf("set the MAC of %s to %s: %w", dataplane.TunnelDevice, mac, err)
		}
	}
	if err := t.ensureFilterAddress(l); err != nil {
		return nil, err
	}
	if err := reversePathLoose(l); err != nil {
		return nil, err
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := t.h.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("set %s up: %w", dataplane.TunnelDevice, err)
		}
	}
	return l, nil
}

// filterAddress is the IPv4 address of the device (link scope, the same on every node, never
// a source of anything routed): the kernel's reverse path filter, strict or loose, drops every
// IPv4 packet that arrives on an interface without an address.
var filterAddress = netip.MustParsePrefix("169.254.229.1/32")

func (t *Tunnel) ensureFilterAddress(l netlink.Link) error {
	addrs, err := t.h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list the addresses of %s: %w", dataplane.TunnelDevice, err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == filterAddress.Addr() {
			return nil
		}
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: filterAddress.Addr().AsSlice(), Mask: net.CIDRMask(32, 32)}, Scope: unix.RT_SCOPE_LINK}
	if err := t.h.AddrAdd(l, a); err != nil {
		return fmt.Errorf("add %s to %s: %w", filterAddress, dataplane.TunnelDevice, err)
	}
	return nil
}

// reversePathLoose makes IPv4 reverse path filtering on the device loose (2): a decapsulated
// packet's pod source is routed back through the CNI's interface, not the tunnel, which strict
// filtering (1, the value of many distributions' net.ipv4.conf.all) would drop. The kernel
// applies the higher of "all" and the device's value, so 2 is loose whatever "all" is.
func reversePathLoose(l netlink.Link) error {
	if rpfilter.Get(dataplane.TunnelDevice) == rpfilter.Loose {
		return nil
	}
	if err := rpfilter.Set(l.Attrs().Index, rpfilter.Loose); err != nil {
		return fmt.Errorf("%s: %w", dataplane.TunnelDevice, err)
	}
	return nil
}

// underlayLink is the index of the interface that holds the address a.
func (t *Tunnel) underlayLink(a netip.Addr) (int, error) {
	addrs, err := t.h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return 0, err
	}
	for _, ad := range addrs {
		if ip, ok := netip.AddrFromSlice(ad.IP); ok && ip.Unmap() == a {
			return ad.LinkIndex, nil
		}
	}
	return 0, fmt.Errorf("no interface holds %s", a)
}

type fdbKey struct {
	mac string
	dst netip.Addr
}

// kernelEntries are the entries on the device: forwarding entries, and permanent neighbour
// entries (address -> MAC). Entries the kernel makes itself (resolution attempts) are not
// egressd's.
type kernelEntries struct {
	fdb   map[fdbKey]bool
	neigh map[netip.Addr]string
}

func (t *Tunnel) read(link netlink.Link) (*kernelEntries, error) {
	k := &kernelEntries{fdb: map[fdbKey]bool{}, neigh: map[netip.Addr]string{}}
	idx := link.Attrs().Index
	fdb, err := t.h.NeighList(idx, unix.AF_BRIDGE)
	if err != nil {
		return nil, fmt.Errorf("list forwarding entries of %s: %w", dataplane.TunnelDevice, err)
	}
	for _, n := range fdb {
		dst, ok := netip.AddrFromSlice(n.IP)
		if n.LinkIndex != idx || !ok {
			continue
		}
		k.fdb[fdbKey{n.HardwareAddr.String(), dst.Unmap()}] = true
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		ns, err := t.h.NeighList(idx, fam)
		if err != nil {
			return nil, fmt.Errorf("list neighbours of %s: %w", dataplane.TunnelDevice, err)
		}
		for _, n := range ns {
			ip, ok := netip.AddrFromSlice(n.IP)
			if n.LinkIndex != idx || !ok || n.State&netlink.NUD_PERMANENT == 0 {
				continue
			}
			k.neigh[ip.Unmap()] = n.HardwareAddr.String()
		}
	}
	return k, nil
}

// fdbEntry is `bridge fdb <mac> dev egressd-vxlan dst <dst> self permanent`.
func fdbEntry(link netlink.Link, mac net.HardwareAddr, dst netip.Addr) *netlink.Neigh {
	return &netlink.Neigh{LinkIndex: link.Attrs().Index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
		State: netlink.NUD_PERMANENT, HardwareAddr: mac, IP: dst.AsSlice()}
}

// neighEntry is `ip neigh <ip> lladdr <mac> dev egressd-vxlan nud permanent`.
func neighEntry(link netlink.Link, ip netip.Addr, mac net.HardwareAddr) *netlink.Neigh {
	fam := netlink.FAMILY_V4
	if ip.Is6() {
		fam = netlink.FAMILY_V6
	}
	return &netlink.Neigh{LinkIndex: link.Attrs().Index, Family: fam, State: netlink.NUD_PERMANENT, IP: ip.AsSlice(), HardwareAddr: mac}
}
