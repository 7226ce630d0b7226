package addresses

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

var (
	egress4 = netip.MustParseAddr("192.0.2.100")
	egress6 = netip.MustParseAddr("2001:db8:1::100")
	eip1    = dataplane.Origin{Kind: "EgressIP", Name: "eip-v4"}
	eip2    = dataplane.Origin{Kind: "EgressIP", Name: "eip-v6"}
	want    = []dataplane.Address{{Origin: eip1, Addr: egress4}, {Origin: eip2, Addr: egress6}}
)

// lab is an L2 segment (a bridge in its own netns) with two nodes and an external host.
type lab struct {
	node, node2, external, host *netns.NS
}

// newLab wires the segment. Each node also has a second interface on a wider network that
// contains the egress addresses too, so that placement must pick eth0 by longest prefix.
//
// Linux takes an announcement of an address it has no entry for only when told to: external
// (a router, like the gateways that matter on a real segment) has arp_accept=1 and, since
// RFC 9131 entries from untracked NAs are created on routers only, forwarding=1 with
// accept_untracked_na=1. host keeps the defaults: it updates an entry it already has (the
// override flag, the gratuitous ARP), which is what a move needs.
func newLab(t *testing.T) *lab {
	lan := netns.New(t, "lan")
	l := &lab{node: netns.New(t, "node"), node2: netns.New(t, "node2"), external: netns.New(t, "ext"), host: netns.New(t, "host")}
	if err := lan.Script("ip link add br0 type bridge", "ip link set br0 up"); err != nil {
		t.Fatal(err)
	}
	hosts := []struct {
		ns   *netns.NS
		port string
		v4   string
		v6   string
	}{{l.node, "p1", "192.0.2.1/24", "2001:db8:1::1/64"}, {l.node2, "p2", "192.0.2.2/24", "2001:db8:1::2/64"}, {l.external, "p3", "192.0.2.10/24", "2001:db8:1::10/64"},
		{l.host, "p4", "192.0.2.11/24", "2001:db8:1::11/64"}}
	for _, h := range hosts {
		netns.Veth(t, h.ns, "eth0", lan, h.port)
		lan.MustRun(t, "ip", "link", "set", h.port, "master", "br0")
		h.ns.Addr(t, "eth0", h.v4, h.v6)
	}
	for _, n := range []*netns.NS{l.node, l.node2} {
		side := netns.New(t, "side")
		netns.Veth(t, n, "eth1", side, "eth0")
		n.Addr(t, "eth1", "192.0.0.1/16", "2001:db8::1/32")
	}
	if err := l.external.Script(
		"sysctl -qw net.ipv4.conf.all.arp_accept=1", "sysctl -qw net.ipv4.conf.eth0.arp_accept=1",
		"sysctl -qw net.ipv6.conf.all.forwarding=1", "sysctl -qw net.ipv6.conf.all.accept_untracked_na=1", "sysctl -qw net.ipv6.conf.eth0.accept_untracked_na=1",
	); err != nil {
		t.Fatal(err)
	}
	return l
}

// in runs f in ns with a fresh Addresses of the default protocol.
func in(t *testing.T, ns *netns.NS, f func(a *Addresses) error) {
	t.Helper()
	err := ns.Do(func() error {
		a, err := New(DefaultProtocol, 0)
		if err != nil {
			return err
		}
		return f(a)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func apply(a *Addresses, want []dataplane.Address) error {
	if failed := a.Apply(want); len(failed) > 0 {
		return fmt.Errorf("apply: %v", failed)
	}
	return nil
}

func mac(t *testing.T, ns *netns.NS, dev string) string {
	t.Helper()
	var links []struct{ Address string }
	if err := json.Unmarshal([]byte(ns.MustRun(t, "ip", "-j", "link", "show", "dev", dev)), &links); err != nil || len(links) != 1 {
		t.Fatalf("link %s: %v", dev, err)
	}
	return links[0].Address
}

// waitNeigh waits until ns's neighbour entry for ip on eth0 has lladdr want.
func waitNeigh(t *testing.T, ns *netns.NS, ip netip.Addr, want string) {
	t.Helper()
	var out string
	for range 50 {
		out = ns.MustRun(t, "ip", "-j", "neigh", "show", "to", ip.String(), "dev", "eth0")
		var n []struct{ Lladdr string }
		if json.Unmarshal([]byte(out), &n) == nil && len(n) == 1 && n[0].Lladdr == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: neighbour entry for %s is %s, want lladdr %s", ns.Name, ip, out, want)
}

type addrInfo struct {
	Local         string
	Prefixlen     int
	Scope         string
	Nodad         bool
	ValidLifeTime uint32 `json:"valid_life_time"`
	Protocol      string
}

// shown is what `ip -d -j addr show to ip` says about ip, per interface.
func shown(t *testing.T, ns *netns.NS, ip netip.Addr) map[string]addrInfo {
	t.Helper()
	var links []struct {
		Ifname   string
		AddrInfo []addrInfo `json:"addr_info"`
	}
	if err := json.Unmarshal([]byte(ns.MustRun(t, "ip", "-d", "-j", "addr", "show", "to", ip.String())), &links); err != nil {
		t.Fatal(err)
	}
	out := map[string]addrInfo{}
	for _, l := range links {
		for _, a := range l.AddrInfo {
			if a.Local == ip.String() {
				out[l.Ifname] = a
			}
		}
	}
	return out
}

// protocols reads IFA_PROTO of ip's addresses from the kernel. iproute2 6.1 (Debian 12) does not
// print it; where a newer one does, shown's Protocol is checked as well.
func protocols(t *testing.T, ns *netns.NS, ip netip.Addr) []uint8 {
	t.Helper()
	var out []uint8
	if err := ns.Do(func() error {
		kernel, err := dump()
		for _, k := range kernel {
			if k.prefix.Addr() == ip {
				out = append(out, k.proto)
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPrivilegedAnnounceAndMove(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	in(t, l.node, func(a *Addresses) error { return apply(a, want) })

	for _, ip := range []netip.Addr{egress4, egress6} {
		got := shown(t, l.node, ip)
		a, ok := got["eth0"]
		if len(got) != 1 || !ok {
			t.Fatalf("%s is on %v, want eth0 only (longest prefix)", ip, got)
		}
		if a.Prefixlen != ip.BitLen() || a.Scope != "global" || a.ValidLifeTime != 0xffffffff || a.Nodad != ip.Is6() {
			t.Errorf("%s: %+v, want /%d scope global, valid forever, nodad only for IPv6", ip, a, ip.BitLen())
		}
		if a.Protocol != "" && a.Protocol != "0xe5" {
			t.Errorf("%s: ip shows protocol %s, want 0xe5", ip, a.Protocol)
		}
		if p := protocols(t, l.node, ip); !slices.Equal(p, []uint8{DefaultProtocol}) {
			t.Errorf("%s: IFA_PROTO %v, want [229]", ip, p)
		}
		// Nothing but the announcement tells external about the address.
		waitNeigh(t, l.external, ip, mac(t, l.node, "eth0"))
	}

	// host learns the addresses the usual way, by resolving them.
	for _, ip := range []netip.Addr{egress4, egress6} {
		l.host.MustRun(t, "ping", "-c1", "-W2", ip.String())
		waitNeigh(t, l.host, ip, mac(t, l.node, "eth0"))
	}

	// The assignment moves to node2: it takes the addresses, then node lets them go. Both
	// neighbours switch to node2 on the announcement alone.
	in(t, l.node2, func(a *Addresses) error { return apply(a, want) })
	in(t, l.node, func(a *Addresses) error { return a.Prune(nil) })
	for _, ip := range []netip.Addr{egress4, egress6} {
		waitNeigh(t, l.external, ip, mac(t, l.node2, "eth0"))
		waitNeigh(t, l.host, ip, mac(t, l.node2, "eth0"))
		if got := shown(t, l.node, ip); len(got) != 0 {
			t.Errorf("%s still on node after Prune: %v", ip, got)
		}
	}
}

func TestPrivilegedRestartAdoptsAndPrunes(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	stale := dataplane.Address{Origin: dataplane.Origin{Kind: "EgressIP", Name: "moved"}, Addr: netip.MustParseAddr("192.0.2.200")}
	other := netip.MustParseAddr("192.0.2.201") // another agent's (IFA_PROTO 85)
	in(t, l.node, func(a *Addresses) error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := add(other, eth0.Attrs().Index, 85, 0); err != nil {
			return err
		}
		return apply(a, append(slices.Clone(want), stale))
	})
	l.node.MustRun(t, "ip", "addr", "add", "192.0.2.202/32", "dev", "eth0") // the admin's (no protocol)

	// A restarted agent, to which stale is no longer assigned: adopts the rest as it is and
	// removes stale at once.
	handle, err := vnetns.GetFromPath(l.node.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer handle.Close()
	events := make(chan netlink.AddrUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.AddrSubscribeWithOptions(events, done, netlink.AddrSubscribeOptions{Namespace: &handle}); err != nil {
		t.Fatal(err)
	}
	in(t, l.node, func(a *Addresses) error {
		// Its own are not the node's; the node's, which it did not add, are.
		listed := map[netip.Addr]bool{}
		for _, p := range a.Others() {
			listed[p.Addr()] = true
		}
		for _, ip := range []netip.Addr{egress4, egress6, stale.Addr} {
			if listed[ip] {
				return fmt.Errorf("restarted agent counts its %s as the node's", ip)
			}
		}
		for _, ip := range []netip.Addr{other, netip.MustParseAddr("192.0.2.202"), netip.MustParseAddr("192.0.2.1")} {
			if !listed[ip] {
				return fmt.Errorf("restarted agent claims %s, which it did not add (the node's: %v)", ip, a.Others())
			}
		}
		if err := a.Prune(want); err != nil {
			return err
		}
		return apply(a, want)
	})
	deadline := time.After(200 * time.Millisecond)
	var changed []string
collect:
	for {
		select {
		case u := <-events:
			changed = append(changed, fmt.Sprintf("new=%v %s", u.NewAddr, u.LinkAddress.IP))
		case <-deadline:
			break collect
		}
	}
	if !slices.Equal(changed, []string{"new=false 192.0.2.200"}) {
		t.Errorf("address changes during restart: %v, want only the removal of 192.0.2.200", changed)
	}

	// Prune of nothing removes egressd's addresses only.
	in(t, l.node, func(a *Addresses) error { return a.Prune(nil) })
	out := l.node.MustRun(t, "ip", "-j", "addr", "show", "dev", "eth0")
	for _, gone := range []string{egress4.String(), egress6.String(), stale.Addr.String()} {
		if strings.Contains(out, `"`+gone+`"`) {
			t.Errorf("%s survived Prune(nil): %s", gone, out)
		}
	}
	for _, kept := range []string{other.String(), "192.0.2.202", "192.0.2.1", "2001:db8:1::1"} {
		if !strings.Contains(out, `"`+kept+`"`) {
			t.Errorf("%s (not egressd's) was removed: %s", kept, out)
		}
	}
}

func TestPrivilegedErrorsRetryAndCleanup(t *testing.T) {
	privileged.Require(t)
	node, external := netns.New(t, "node"), netns.New(t, "ext")
	netns.Veth(t, node, "eth0", external, "eth0")
	node.Addr(t, "eth0", "192.0.2.1/24")
	external.Addr(t, "eth0", "192.0.2.10/24")
	external.MustRun(t, "sysctl", "-qw", "net.ipv4.conf.all.arp_accept=1", "net.ipv4.conf.eth0.arp_accept=1")
	origin := func(name string) dataplane.Origin { return dataplane.Origin{Kind: "EgressIP", Name: name} }
	down := netip.MustParseAddr("192.0.2.50")

	node.MustRun(t, "ip", "link", "set", "eth0", "down")
	var a *Addresses // one agent throughout
	in(t, node, func(fresh *Addresses) error {
		a = fresh
		failed := a.Apply([]dataplane.Address{
			{Origin: origin("nowhere"), Addr: netip.MustParseAddr("198.51.100.5")},
			{Origin: origin("nodeip"), Addr: netip.MustParseAddr("192.0.2.1"), Interface: "eth0"},
			{Origin: origin("noiface"), Addr: netip.MustParseAddr("192.0.2.60"), Interface: "nope"},
			{Origin: origin("down"), Addr: down, Interface: "eth0"},
			{Origin: origin("down-too"), Addr: down, Interface: "eth0"}, // same address, same outcome
		})
		for _, want := range []struct{ name, err string }{
			{"nowhere", "no UP interface"}, {"nodeip", "not added by egressd"}, {"noiface", `"nope"`}, {"down", "announce"}, {"down-too", "announce"},
		} {
			if err := failed[origin(want.name)]; err == nil || !strings.Contains(err.Error(), want.err) {
				t.Errorf("%s: error %v, want one saying %q", want.name, err, want.err)
			}
		}
		if len(failed) != 5 {
			t.Errorf("errors %v, want 5", failed)
		}
		return nil
	})
	// The address is there but unannounced; once the link is up, the next Apply announces it.
	if got := shown(t, node, down); len(got) != 1 {
		t.Fatalf("%s on %v, want on eth0", down, got)
	}
	node.MustRun(t, "ip", "link", "set", "eth0", "up")
	if err := node.Do(func() error {
		if failed := a.Apply([]dataplane.Address{{Origin: origin("down"), Addr: down, Interface: "eth0"}}); len(failed) != 0 {
			return fmt.Errorf("apply after failed announcement: %v", failed)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Announce on demand (after a link flap, say) works on what is there.
	waitNeigh(t, external, down, mac(t, node, "eth0"))
	if err := node.Do(func() error { return a.Announce(down) }); err != nil {
		t.Fatal(err)
	}

	err := node.Do(func() error {
		if Cleanup(0) == nil {
			return fmt.Errorf("Cleanup(0) accepted")
		}
		return Cleanup(DefaultProtocol)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := shown(t, node, down); len(got) != 0 {
		t.Errorf("%s survived Cleanup: %v", down, got)
	}
	if got := shown(t, node, netip.MustParseAddr("192.0.2.1")); len(got) != 1 {
		t.Errorf("the node's own address went with Cleanup")
	}
}

// While the address events are watched, Prune trusts its last listing until the addresses
// change (Changed) or relist passes: an address stamped behind egressd's back is removed then,
// and the node's addresses (Others) are listed again. Unwatched, it lists every time.
func TestPrivilegedPruneListsWhenChanged(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	drift := netip.MustParseAddr("192.0.2.203")
	node := netip.MustParseAddr("192.0.2.204") // the admin's, added after the listing
	present := func(ip netip.Addr) bool {
		return strings.Contains(l.node.MustRun(t, "ip", "-j", "addr", "show", "dev", "eth0"), `"`+ip.String()+`"`)
	}
	in(t, l.node, func(a *Addresses) error {
		if err := apply(a, want); err != nil {
			return err
		}
		a.Watched(true)
		if err := a.Prune(want); err != nil {
			return err
		}
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := add(drift, eth0.Attrs().Index, DefaultProtocol, 0); err != nil {
			return err
		}
		if err := add(node, eth0.Attrs().Index, 0, 0); err != nil {
			return err
		}
		if err := a.Prune(want); err != nil {
			return err
		}
		if !present(drift) {
			return fmt.Errorf("Prune listed the addresses again without a change told")
		}
		a.Changed()
		if err := a.Prune(want); err != nil {
			return err
		}
		if present(drift) {
			return fmt.Errorf("%s, stamped behind egressd's back, survived a Prune after Changed", drift)
		}
		if !slices.ContainsFunc(a.Others(), func(p netip.Prefix) bool { return p.Addr() == node }) {
			return fmt.Errorf("the node's %s is not among its addresses after a Prune that listed: %v", node, a.Others())
		}
		if err := add(drift, eth0.Attrs().Index, DefaultProtocol, 0); err != nil {
			return err
		}
		defer func(r time.Duration) { relist = r }(relist)
		relist = 0
		if err := a.Prune(want); err != nil {
			return err
		}
		if present(drift) {
			return fmt.Errorf("%s survived a Prune after relist passed", drift)
		}
		relist = time.Hour
		a.Watched(false)
		if err := a.Prune(want); err != nil {
			return err
		}
		if err := add(drift, eth0.Attrs().Index, DefaultProtocol, 0); err != nil {
			return err
		}
		if err := a.Prune(want); err != nil {
			return err
		}
		if present(drift) {
			return fmt.Errorf("%s survived a Prune with the address events unwatched", drift)
		}
		return nil
	})
	if !present(egress4) || !present(egress6) {
		t.Errorf("wanted addresses were removed")
	}
}

// TestPrivilegedHolds: Holds answers for the addresses egressd holds, on their interface only,
// from New (an adopted address), after Apply and after a move, and no longer after Prune.
func TestPrivilegedHolds(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	in(t, l.node, func(a *Addresses) error { return apply(a, want) })
	in(t, l.node, func(a *Addresses) error {
		eth0, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		eth1, err := net.InterfaceByName("eth1")
		if err != nil {
			return err
		}
		if !a.Holds(egress4, eth0.Index) || a.Holds(egress4, eth1.Index) {
			t.Errorf("adopted %s: holds on eth0 %v, on eth1 %v; want only eth0", egress4, a.Holds(egress4, eth0.Index), a.Holds(egress4, eth1.Index))
		}
		moved := []dataplane.Address{{Origin: eip1, Addr: egress4, Interface: "eth1"}}
		if failed := a.Apply(moved); len(failed) > 0 {
			return fmt.Errorf("move: %v", failed)
		}
		if a.Holds(egress4, eth0.Index) || !a.Holds(egress4, eth1.Index) {
			t.Errorf("moved %s to eth1: holds on eth0 %v, on eth1 %v", egress4, a.Holds(egress4, eth0.Index), a.Holds(egress4, eth1.Index))
		}
		if err := a.Prune(nil); err != nil {
			return err
		}
		if a.Holds(egress4, eth1.Index) || a.Holds(egress6, eth0.Index) {
			t.Error("Holds answers for addresses pruned")
		}
		return nil
	})
}
