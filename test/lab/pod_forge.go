package lab

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

// ClaimARP sends, from the pod's eth0, gratuitous ARP replies that claim ip for the pod's own
// MAC, as a pod with NET_RAW can: what a neighbour that believes them sends to ip comes to this
// pod instead.
func (p *Pod) ClaimARP(ip netip.Addr, count int) error {
	return p.NS.Do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		c, err := arp.Dial(ifi)
		if err != nil {
			return fmt.Errorf("ARP socket on %s of %s: %w", ifi.Name, p.Name, err)
		}
		defer c.Close()
		pkt, err := arp.NewPacket(arp.OperationReply, ifi.HardwareAddr, ip, ethernet.Broadcast, ip)
		if err != nil {
			return err
		}
		for range count {
			if err := c.WriteTo(pkt, ethernet.Broadcast); err != nil {
				return fmt.Errorf("send ARP from %s: %w", p.Name, err)
			}
		}
		return nil
	})
}

// ClaimNA is ClaimARP for IPv6: unsolicited neighbour advertisements, from the pod's own
// link-local address, that claim ip (override set) for the pod's MAC.
func (p *Pod) ClaimNA(ip netip.Addr, count int) error {
	return p.NS.Do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		c, _, err := ndp.Listen(ifi, ndp.LinkLocal)
		if err != nil {
			return fmt.Errorf("ICMPv6 socket on %s of %s: %w", ifi.Name, p.Name, err)
		}
		defer c.Close()
		na := &ndp.NeighborAdvertisement{Override: true, TargetAddress: ip,
			Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: ifi.HardwareAddr}}}
		for range count {
			if err := c.WriteTo(na, nil, netip.IPv6LinkLocalAllNodes()); err != nil {
				return fmt.Errorf("send NA from %s: %w", p.Name, err)
			}
		}
		return nil
	})
}
