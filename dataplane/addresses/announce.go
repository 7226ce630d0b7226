package addresses

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

// allNodes is the IPv6 link-local all-nodes group that unsolicited advertisements go to.
var allNodes = netip.MustParseAddr("ff02::1")

// writeTimeout bounds a send on an interface whose queue does not drain.
const writeTimeout = time.Second

// Announce tells the link that ip now lives behind ifi's MAC, so that neighbours and switches
// that cached another owner (the node the address moved from) switch at once instead of when
// their entries expire. Interfaces without a MAC (tun, point-to-point) have no neighbours to
// tell.
func Announce(ifi *net.Interface, ip netip.Addr) error {
	if len(ifi.HardwareAddr) == 0 {
		return nil
	}
	var err error
	if ip.Is4() {
		err = garp(ifi, ip)
	} else {
		err = unsolicitedNA(ifi, ip)
	}
	if err != nil {
		return fmt.Errorf("announce %s on %s: %w", ip, ifi.Name, err)
	}
	return nil
}

// garp broadcasts a gratuitous ARP request and reply, sender and target both ip. Linux peers
// take either into their table (with arp_accept); other stacks and switches honour one or the
// other, hence both. The reply's target hardware address is the sender's, as a gratuitous reply
// must carry for Linux to treat it as one.
func garp(ifi *net.Interface, ip netip.Addr) error {
	c, err := arp.Dial(ifi)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	zero := make(net.HardwareAddr, len(ifi.HardwareAddr))
	var errs []error
	for _, p := range []struct {
		op  arp.Operation
		tha net.HardwareAddr
	}{{arp.OperationRequest, zero}, {arp.OperationReply, ifi.HardwareAddr}} {
		pkt, err := arp.NewPacket(p.op, ifi.HardwareAddr, ip, p.tha, ip)
		if err == nil {
			err = c.WriteTo(pkt, ethernet.Broadcast)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unsolicitedNA sends a Neighbor Advertisement for ip to all nodes, from ip itself (as Linux
// does for its own addresses), with the override flag so that existing entries take the new
// MAC, and the target link-layer address option that carries it.
func unsolicitedNA(ifi *net.Interface, ip netip.Addr) error {
	c, _, err := ndp.Listen(ifi, ndp.Addr(ip.String()))
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	na := &ndp.NeighborAdvertisement{
		Override:      true,
		TargetAddress: ip,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: ifi.HardwareAddr}},
	}
	return c.WriteTo(na, nil, allNodes)
}
