package addresses

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// linkSet holds the interfaces of the node by index: whether each is up, and its name.
type linkSet struct {
	up   map[int]bool
	name map[int]string
}

func readLinks() (*linkSet, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	s := &linkSet{up: map[int]bool{}, name: map[int]string{}}
	for _, l := range links {
		attrs := l.Attrs()
		s.name[attrs.Index] = attrs.Name
		s.up[attrs.Index] = attrs.Flags&net.FlagUp != 0 && attrs.Flags&net.FlagLoopback == 0
	}
	return s, nil
}

// place finds the interface for ip: the named one, or else the UP interface with a network
// containing ip, by longest prefix, as upstream does for egress IPs on secondary host networks.
// Host-prefix addresses (egress and virtual IPs of every kind), link-local and non-global
// addresses say nothing about which network an interface is on and are skipped.
func (a *Addresses) place(name string, ip netip.Addr, kernel []kaddr, links *linkSet) (int, error) {
	if name != "" {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return 0, fmt.Errorf("interface %q for %s: %w", name, ip, err)
		}
		return l.Attrs().Index, nil
	}
	best, bits := 0, -1
	for _, k := range kernel {
		p := k.prefix
		if k.proto == a.protocol || !links.up[k.ifindex] || k.scope != unix.RT_SCOPE_UNIVERSE ||
			p.Bits() == p.Addr().BitLen() || !p.Addr().IsGlobalUnicast() || p.Addr().IsLinkLocalUnicast() ||
			!p.Masked().Contains(ip) {
			continue
		}
		if p.Bits() > bits || (p.Bits() == bits && k.ifindex < best) {
			best, bits = k.ifindex, p.Bits()
		}
	}
	if bits < 0 {
		return 0, fmt.Errorf("no UP interface has a network containing %s", ip)
	}
	return best, nil
}
