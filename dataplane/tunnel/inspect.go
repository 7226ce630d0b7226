package tunnel

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// Info is egressd's tunnel as the kernel holds it (egressctl).
type Info struct {
	VNI   int
	Port  int
	Local netip.Addr
	MAC   string
	Peers []PeerInfo
}

// PeerInfo is one node the tunnel reaches: its forwarding entry and the next hops (permanent
// neighbour entries) that resolve to its MAC.
type PeerInfo struct {
	MAC      string
	Underlay netip.Addr
	Nexthops []netip.Addr
}

// Inspect reads the tunnel of the calling thread's network namespace; nil when there is none.
func Inspect() (*Info, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	t := &Tunnel{h: h}
	l, err := h.LinkByName(dataplane.TunnelDevice)
	if errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("find %s: %w", dataplane.TunnelDevice, err)
	}
	vx, ok := l.(*netlink.Vxlan)
	if !ok {
		return nil, fmt.Errorf("%s is a %s device, not egressd's VXLAN device", dataplane.TunnelDevice, l.Type())
	}
	local, _ := netip.AddrFromSlice(vx.SrcAddr)
	info := &Info{VNI: vx.VxlanId, Port: vx.Port, Local: local.Unmap(), MAC: l.Attrs().HardwareAddr.String()}
	k, err := t.read(l)
	if err != nil {
		return nil, err
	}
	for key := range k.fdb {
		p := PeerInfo{MAC: key.mac, Underlay: key.dst}
		for ip, mac := range k.neigh {
			if mac == key.mac {
				p.Nexthops = append(p.Nexthops, ip)
			}
		}
		slices.SortFunc(p.Nexthops, netip.Addr.Compare)
		info.Peers = append(info.Peers, p)
	}
	slices.SortFunc(info.Peers, func(a, b PeerInfo) int { return a.Underlay.Compare(b.Underlay) })
	return info, nil
}
