package router

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane/addresses"
)

// Applied says what Apply configured (for the status message).
type Applied struct {
	// Master is the node NIC the macvlan sits on.
	Master string
}

// Apply configures the router c in the network namespace at nsPath, whose cluster-side
// interface is primary (CNI_IFNAME). The calling thread must be in the node's namespace, where
// the master NIC is. A macvlan left by an earlier attempt is replaced. Needs CAP_NET_ADMIN and
// CAP_SYS_ADMIN (to enter the pod's namespace).
func Apply(c *Config, nsPath, primary string) (Applied, error) {
	if err := c.Validate(); err != nil {
		return Applied{}, err
	}
	target, err := netns.GetFromPath(nsPath)
	if err != nil {
		return Applied{}, fmt.Errorf("open the pod's network namespace %s: %w", nsPath, err)
	}
	defer target.Close()
	master, err := findMaster(c)
	if err != nil {
		return Applied{}, err
	}
	done := Applied{Master: master.Attrs().Name}
	if err := inNS(target, removeMacvlan); err != nil {
		return done, err
	}
	mv := &netlink.Macvlan{
		LinkAttrs: netlink.LinkAttrs{Name: Interface, ParentIndex: master.Attrs().Index, Namespace: netlink.NsFd(int(target))},
		Mode:      macvlanModes[c.Mode],
	}
	if err := netlink.LinkAdd(mv); err != nil {
		return done, fmt.Errorf("macvlan %s (%s) on %s: %w", Interface, c.Mode, master.Attrs().Name, err)
	}
	return done, inNS(target, func() error { return configure(c, primary) })
}

var macvlanModes = map[Mode]netlink.MacvlanMode{
	Bridge: netlink.MACVLAN_MODE_BRIDGE, Private: netlink.MACVLAN_MODE_PRIVATE,
	VEPA: netlink.MACVLAN_MODE_VEPA, Passthru: netlink.MACVLAN_MODE_PASSTHRU,
}

// findMaster is c.Master, else the node link holding an address in the subnet of the router's
// first address, else the link of the node's default route of that family (upstream's choice).
func findMaster(c *Config) (netlink.Link, error) {
	if c.Master != "" {
		l, err := netlink.LinkByName(c.Master)
		if err != nil {
			return nil, fmt.Errorf("macvlan master %q: %w", c.Master, err)
		}
		return l, nil
	}
	first := c.Addresses[0]
	family := netlink.FAMILY_V6
	if first.Addr().Is4() {
		family = netlink.FAMILY_V4
	}
	addrs, err := netlink.AddrList(nil, family)
	if err != nil {
		return nil, fmt.Errorf("list the node's addresses: %w", err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		ones, _ := a.Mask.Size()
		if ok && netip.PrefixFrom(ip.Unmap(), ones).Masked().Contains(first.Addr()) {
			return netlink.LinkByIndex(a.LinkIndex)
		}
	}
	routes, err := netlink.RouteList(nil, family)
	if err != nil {
		return nil, fmt.Errorf("list the node's routes: %w", err)
	}
	for _, r := range routes {
		if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.LinkIndex > 0 {
			return netlink.LinkByIndex(r.LinkIndex)
		}
	}
	return nil, fmt.Errorf("no node interface has an address in %s nor a default route: set networkInterface.macvlan.master", first.Masked())
}

// inNS runs f on a thread in ns. The thread stays locked when f returns, so the Go runtime
// discards it rather than reuse a thread in another namespace.
func inNS(ns netns.NsHandle, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter the pod's network namespace: %w", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

func removeMacvlan() error {
	l, err := netlink.LinkByName(Interface)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look for an earlier %s: %w", Interface, err)
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("remove an earlier %s: %w", Interface, err)
	}
	return nil
}

// configure runs inside the pod's namespace, with the macvlan there.
func configure(c *Config, primary string) error {
	mv, err := netlink.LinkByName(Interface)
	if err != nil {
		return fmt.Errorf("macvlan %s in the pod: %w", Interface, err)
	}
	for _, p := range c.Addresses {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD // the address must answer at once; the announcement claims it
		}
		if err := netlink.AddrAdd(mv, a); err != nil {
			return fmt.Errorf("address %s on %s: %w", p, Interface, err)
		}
	}
	if err := netlink.LinkSetUp(mv); err != nil {
		return fmt.Errorf("set %s up: %w", Interface, err)
	}
	if err := forwarding(c); err != nil {
		return err
	}
	for _, gw := range c.Gateways {
		if err := routeVia(c, gw, mv.Attrs().Index); err != nil {
			return err
		}
	}
	if err := writeTable(c, primary); err != nil {
		return fmt.Errorf("nftables table %s: %w", tableName, err)
	}
	ifi, err := net.InterfaceByName(Interface)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range c.Addresses {
		errs = append(errs, addresses.Announce(ifi, p.Addr()))
	}
	return errors.Join(errs...)
}

func forwarding(c *Config) error {
	files := map[bool]string{true: "/proc/sys/net/ipv4/ip_forward", false: "/proc/sys/net/ipv6/conf/all/forwarding"}
	for v4, f := range files {
		if _, ok := c.source(v4); !ok {
			continue
		}
		if err := os.WriteFile(f, []byte("1"), 0o644); err != nil {
			return fmt.Errorf("forwarding on: %w", err)
		}
	}
	return nil
}

// routeVia keeps the cluster networks of gw's family on the pod's current default route (its
// primary interface), then points the default route at gw on the macvlan.
func routeVia(c *Config, gw netip.Addr, link int) error {
	family, bits := netlink.FAMILY_V6, 128
	if gw.Is4() {
		family, bits = netlink.FAMILY_V4, 32
	}
	routes, err := netlink.RouteList(nil, family)
	if err != nil {
		return fmt.Errorf("list the pod's routes: %w", err)
	}
	var current *netlink.Route
	for i, r := range routes {
		if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.LinkIndex != link {
			current = &routes[i]
			break
		}
	}
	for _, n := range c.ClusterNetworks {
		if n.Addr().Is4() != gw.Is4() || current == nil {
			continue
		}
		r := &netlink.Route{Dst: &net.IPNet{IP: n.Addr().AsSlice(), Mask: net.CIDRMask(n.Bits(), bits)},
			Gw: current.Gw, LinkIndex: current.LinkIndex, Flags: current.Flags, Family: family}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("route %s via the pod's %s: %w", n, current.Gw, err)
		}
	}
	// The gateway on the link first, as upstream's egress-router-cni does: an address given
	// without a prefix length (a /32 or /128) has no connected route to reach it by.
	host := &netlink.Route{Dst: &net.IPNet{IP: gw.AsSlice(), Mask: net.CIDRMask(bits, bits)}, LinkIndex: link,
		Scope: netlink.SCOPE_LINK, Family: family}
	if err := netlink.RouteReplace(host); err != nil {
		return fmt.Errorf("route to the gateway %s on %s: %w", gw, Interface, err)
	}
	def := &netlink.Route{Dst: &net.IPNet{IP: make(net.IP, bits/8), Mask: net.CIDRMask(0, bits)}, Gw: gw.AsSlice(), LinkIndex: link, Family: family}
	if err := netlink.RouteReplace(def); err != nil {
		return fmt.Errorf("default route via %s on %s: %w", gw, Interface, err)
	}
	return nil
}
