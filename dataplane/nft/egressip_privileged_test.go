package nft_test

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/nft"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// peers records, per payload, the source address a UDP server saw.
type peers struct {
	mu   sync.Mutex
	seen map[string]netip.Addr
}

// serve receives on a UDP socket opened in ns.
func (p *peers) serve(t *testing.T, ns *netns.NS, network, addr string) {
	t.Helper()
	var c net.PacketConn
	if err := ns.Do(func() (err error) { c, err = net.ListenPacket(network, addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			p.mu.Lock()
			p.seen[string(buf[:n])] = from.(*net.UDPAddr).AddrPort().Addr().Unmap()
			p.mu.Unlock()
		}
	}()
}

// wait is the source that payload arrived from, or no address if it did not arrive in time.
func (p *peers) wait(payload string, d time.Duration) netip.Addr {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		p.mu.Lock()
		a, ok := p.seen[payload]
		p.mu.Unlock()
		if ok {
			return a
		}
	}
	return netip.Addr{}
}

// exchange sends payload from src to dst in ns and returns the answer (or an error: none came).
func exchange(ns *netns.NS, src, dst netip.AddrPort, payload string, answer bool) (string, error) {
	var c *net.UDPConn
	if err := ns.Do(func() (err error) {
		c, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(src), net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Write([]byte(payload)); err != nil || !answer {
		return "", err
	}
	buf := make([]byte, 1500)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// TestPrivilegedEgressIPTraffic sends real traffic pod netns -> node netns (egressd's table, a
// competing CNI masquerade table, a stand-in for the classifier's marks, policy routing) ->
// external netns, and checks the source address the external side sees.
func TestPrivilegedEgressIPTraffic(t *testing.T) {
	privileged.Require(t)
	pod, node, ext := netns.New(t, "pod"), netns.New(t, "node"), netns.New(t, "ext")
	netns.Veth(t, pod, "eth0", node, "pod0")
	netns.Veth(t, node, "ext0", ext, "eth0")
	// A secondary network, 198.51.100.0/24 on ext1, holding the egress IP 198.51.100.100.
	netns.Veth(t, node, "ext1", ext, "eth1")
	node.Addr(t, "ext1", "198.51.100.1/24", "198.51.100.100/32")
	ext.Addr(t, "eth1", "198.51.100.2/24")
	pod.Addr(t, "eth0", "10.244.0.4/24", "10.244.0.10/24", "10.244.0.11/24", "10.244.0.12/24", "10.244.0.5/24", "10.244.0.6/24", "10.244.0.7/24", "10.244.0.9/24", "10.245.0.8/32",
		"10.246.0.3/32", "fd00:10:244::5/64", "fd00:10:244::6/64", "fd00:10:244::8/64", "fd00:10:246::3/128")
	node.Addr(t, "pod0", "10.244.0.1/24", "fd00:10:244::1/64")
	node.Addr(t, "ext0", "192.0.2.1/24", "192.0.2.100/32", "2001:db8:0:1::1/64", "2001:db8:0:1::100/128")
	ext.Addr(t, "eth0", "192.0.2.2/24", "192.0.2.3/24", "2001:db8:0:1::2/64", "2001:db8:0:1::3/64")
	ext.Addr(t, "lo", "203.0.113.10/32", "2001:db8:ff::10/128")
	for _, err := range []error{
		pod.Script("ip route add default via 10.244.0.1", "ip -6 route add default via fd00:10:244::1"),
		node.Script(
			"sysctl -qw net.ipv4.ip_forward=1", "sysctl -qw net.ipv6.conf.all.forwarding=1",
			"sysctl -qw net.ipv4.conf.all.rp_filter=0", "sysctl -qw net.ipv4.conf.default.rp_filter=0",
			"ip route add 10.245.0.8/32 dev pod0", "ip route add 10.246.0.3/32 dev pod0",
			"ip -6 route add fd00:10:246::3/128 dev pod0",
			"ip route add default via 192.0.2.3", "ip -6 route add default via 2001:db8:0:1::3",
			// Policy routing of the steering marks: 1 to the egress node (allowed), 2 elsewhere
			// (not allowed), 3 nowhere (what a reply must never follow).
			"ip rule add fwmark 0x10000/0xff0000 table 100", "ip route add default via 192.0.2.2 table 100",
			"ip -6 rule add fwmark 0x10000/0xff0000 table 100", "ip -6 route add default via 2001:db8:0:1::2 table 100",
			"ip rule add fwmark 0x20000/0xff0000 table 101", "ip route add default via 192.0.2.3 table 101",
			"ip rule add fwmark 0x30000/0xff0000 table 102", "ip route add blackhole default table 102",
			// The secondary network's table (mark 4), as the routing copies it.
			"ip rule add fwmark 0x40000/0xff0000 table 103", "ip route add default via 198.51.100.2 dev ext1 table 103",
			// The CNI's masquerade, at the standard srcnat priority.
			"nft add table ip cni",
			"nft add chain ip cni post { type nat hook postrouting priority srcnat ; }",
			"nft add rule ip cni post ip saddr 10.244.0.0/16 masquerade",
			// Standing for the classifier: marks of pods steered to another node.
			"nft add table inet classifier",
			"nft add chain inet classifier pre { type filter hook prerouting priority raw ; }",
			"nft add rule inet classifier pre ip saddr 10.244.0.6 meta mark set 0x10000",
			"nft add rule inet classifier pre ip saddr 10.244.0.11 meta mark set 0x10000", // a spread flow steered
			"nft add rule inet classifier pre ip saddr 10.244.0.7 meta mark set 0x20000",
			"nft add rule inet classifier pre ip saddr 10.244.0.9 meta mark set 0x30000",
			"nft add rule inet classifier pre ip saddr 10.244.0.4 meta mark set 0x40000",
			"nft add rule inet classifier pre ip6 saddr fd00:10:244::6 meta mark set 0x10000",
		),
		ext.Script("sysctl -qw net.ipv4.conf.all.rp_filter=0", "sysctl -qw net.ipv4.conf.default.rp_filter=0",
			"ip route add 10.244.0.0/16 via 192.0.2.1", "ip -6 route add fd00:10:244::/64 via 2001:db8:0:1::1"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}

	a, p := netip.MustParseAddr, netip.MustParsePrefix
	eip := dataplane.Origin{Kind: "EgressIP", Name: "eip"}
	state := &dataplane.NftablesState{
		SteerMask: 0x00ff0000,
		SNAT: []dataplane.SNAT{{Origin: eip, Pod: a("10.244.0.5"), To: a("192.0.2.100")},
			{Origin: eip, Pod: a("fd00:10:244::5"), To: a("2001:db8:0:1::100")},
			// 10.244.0.4 marked for the secondary network's table; 10.244.0.10 not (its
			// table missing): main would send it out of ext0.
			{Origin: eip, Pod: a("10.244.0.4"), To: a("198.51.100.100")}, {Origin: eip, Pod: a("10.244.0.10"), To: a("198.51.100.100")},
			// Pods on this egress node spread over another: one flow steered, one left here.
			{Origin: eip, Pod: a("10.244.0.11"), To: a("192.0.2.100")}, {Origin: eip, Pod: a("10.244.0.12"), To: a("192.0.2.100")}},
		Spread:    []netip.Addr{a("10.244.0.11"), a("10.244.0.12")},
		Secondary: []netip.Addr{a("198.51.100.100")},
		Exempt:    []netip.Prefix{p("10.244.0.0/16"), p("192.0.2.2/32"), p("fd00:10:244::/64"), p("2001:db8:0:1::2/128")},
		Guarded:   []netip.Addr{a("10.244.0.4"), a("10.244.0.10"), a("10.244.0.11"), a("10.244.0.12"), a("10.244.0.5"), a("10.244.0.6"), a("10.244.0.7"), a("10.244.0.9"), a("10.245.0.8"), a("fd00:10:244::5"), a("fd00:10:244::6"), a("fd00:10:244::8")},
		// Another node's pod network, 10.246.0.0/16: its pods arrive here steered.
		RemotePods: []netip.Prefix{p("10.246.0.0/16"), p("fd00:10:246::/64")},
		SteerNexthops: []dataplane.SteerNexthop{{Mark: 0x10000, Nexthop: a("192.0.2.2")},
			{Mark: 0x10000, Nexthop: a("2001:db8:0:1::2")}},
	}
	var table *nft.Table
	if err := node.Do(func() (err error) {
		if table, err = nft.New(); err != nil {
			return err
		}
		return errFailed(table.Apply(state))
	}); err != nil {
		t.Fatal(err)
	}

	// Resolve the neighbours first: the cases then take milliseconds, not a resolution each.
	for _, c := range [][]string{{"192.0.2.2"}, {"192.0.2.3"}, {"2001:db8:0:1::2"}, {"2001:db8:0:1::3"}} {
		node.MustRun(t, "ping", "-c1", "-W2", c[0])
	}
	pod.MustRun(t, "ping", "-c1", "-W2", "10.244.0.1")
	pod.MustRun(t, "ping", "-c1", "-W2", "fd00:10:244::1")
	seen := &peers{seen: map[string]netip.Addr{}}
	seen.serve(t, ext, "udp4", "0.0.0.0:7777")
	seen.serve(t, ext, "udp6", "[::]:7777")
	dst4, dst6 := a("203.0.113.10"), a("2001:db8:ff::10")
	for _, c := range []struct {
		name     string
		src, dst netip.Addr
		want     netip.Addr // invalid: dropped
	}{
		{"SNAT to the egress IP", a("10.244.0.5"), dst4, a("192.0.2.100")},
		{"SNAT to the egress IP, IPv6", a("fd00:10:244::5"), dst6, a("2001:db8:0:1::100")},
		{"steered to its egress node, masquerade bypassed", a("10.244.0.6"), dst4, a("10.244.0.6")},
		{"steered to its egress node, IPv6", a("fd00:10:244::6"), dst6, a("fd00:10:244::6")},
		{"on an egress node, a flow steered to the other: its pod source", a("10.244.0.11"), dst4, a("10.244.0.11")},
		{"on an egress node, a flow left here: SNAT to the egress IP", a("10.244.0.12"), dst4, a("192.0.2.100")},
		{"steered elsewhere: dropped", a("10.244.0.7"), dst4, netip.Addr{}},
		{"guarded, not SNATed: dropped", a("10.245.0.8"), dst4, netip.Addr{}},
		{"guarded, not SNATed: dropped, IPv6", a("fd00:10:244::8"), dst6, netip.Addr{}},
		{"another node's pod, not known here: dropped, not masqueraded", a("10.246.0.3"), dst4, netip.Addr{}},
		{"another node's pod, not known here: dropped, IPv6", a("fd00:10:246::3"), dst6, netip.Addr{}},
		{"exempt destination: the CNI's masquerade", a("10.244.0.5"), a("192.0.2.2"), a("192.0.2.1")},
		{"SNAT to a secondary network's egress IP, out of its interface", a("10.244.0.4"), dst4, a("198.51.100.100")},
		{"SNAT to a secondary network's egress IP, out of another interface: dropped", a("10.244.0.10"), dst4, netip.Addr{}},
		{"exempt destination: untouched, IPv6", a("fd00:10:244::5"), a("2001:db8:0:1::2"), a("fd00:10:244::5")},
	} {
		payload := fmt.Sprintf("%s %s>%s", c.name, c.src, c.dst)
		if _, err := exchange(pod, netip.AddrPortFrom(c.src, 0), netip.AddrPortFrom(c.dst, 7777), payload, false); err != nil {
			t.Fatal(err)
		}
		wait := 2 * time.Second
		if !c.want.IsValid() {
			wait = 500 * time.Millisecond
		}
		if got := seen.wait(payload, wait); got != c.want {
			t.Errorf("%s: %s -> %s arrived from %v, want %v", c.name, c.src, c.dst, got, c.want)
		}
	}

	// A connection from outside to a pod whose packets the classifier marks: the replies are
	// not steered (mark 3 would blackhole them) and not judged by the guard.
	if err := pod.Do(func() error {
		c, err := net.ListenPacket("udp4", "10.244.0.9:7778")
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 1500)
			n, from, err := c.ReadFrom(buf)
			if err == nil {
				_, _ = c.WriteTo(buf[:n], from)
			}
		}()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, err := exchange(ext, netip.AddrPortFrom(dst4, 0), netip.MustParseAddrPort("10.244.0.9:7778"), "ping", true); err != nil || got != "ping" {
		t.Errorf("reply to a connection from outside: %q, %v; want it back unsteered\n%s", got, err,
			node.MustRun(t, "nft", "list", "table", "inet", "egressd"))
	}

	if c := table.EgressIPCounters(); c[a("192.0.2.100")].Packets != 2 || c[a("2001:db8:0:1::100")].Packets != 1 || c[a("198.51.100.100")].Packets != 2 {
		t.Errorf("SNAT counters %+v, want one packet per egress IP, two for 192.0.2.100 and the secondary one", c)
	}
	if d := table.LeakDrops(); d.Misrouted.Packets != 2 || d.Unsteered.Packets != 2 {
		t.Errorf("leak drops %+v, want 2 misrouted (a steered one, one out of the secondary network) and 2 unsteered", d)
	}
	// The table deleted behind egressd's back and repaired: the counts do not go back.
	node.MustRun(t, "nft", "delete", "table", "inet", "egressd")
	if err := node.Do(func() error { return errFailed(table.Apply(state)) }); err != nil {
		t.Fatal(err)
	}
	if c, d := table.EgressIPCounters(), table.LeakDrops(); c[a("192.0.2.100")].Packets != 2 || d.Unsteered.Packets != 2 {
		t.Errorf("after a repair, SNAT counters %+v and leak drops %+v went back", c, d)
	}
	if t.Failed() {
		t.Log(node.MustRun(t, "nft", "list", "ruleset"))
	}
}
