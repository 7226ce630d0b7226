package nft_test

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/nft"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// flowLab is a pod, a node with egressd's table, the CNI's masquerade and a stand-in for the
// classifier's steering mark (mark: 0x10000, routed to the external host), and the external
// host that records sources.
type flowLab struct {
	pod, node, ext *netns.NS
	table          *nft.Table
	seen           *peers
}

func newFlowLab(t *testing.T) *flowLab {
	t.Helper()
	l := &flowLab{pod: netns.New(t, "pod"), node: netns.New(t, "node"), ext: netns.New(t, "ext"), seen: &peers{seen: map[string]netip.Addr{}}}
	netns.Veth(t, l.pod, "eth0", l.node, "pod0")
	netns.Veth(t, l.node, "ext0", l.ext, "eth0")
	l.pod.Addr(t, "eth0", "10.244.0.5/24", "10.244.0.6/24", "fd00:10:244::5/64", "fd00:10:244::6/64")
	l.node.Addr(t, "pod0", "10.244.0.1/24", "fd00:10:244::1/64")
	l.node.Addr(t, "ext0", "192.0.2.1/24", "192.0.2.100/32", "2001:db8:0:1::1/64", "2001:db8:0:1::100/128")
	l.ext.Addr(t, "eth0", "192.0.2.2/24", "2001:db8:0:1::2/64")
	l.ext.Addr(t, "lo", "203.0.113.10/32", "2001:db8:ff::10/128")
	for _, err := range []error{
		l.pod.Script("ip route add default via 10.244.0.1", "ip -6 route add default via fd00:10:244::1"),
		l.node.Script(
			"sysctl -qw net.ipv4.ip_forward=1", "sysctl -qw net.ipv6.conf.all.forwarding=1",
			"sysctl -qw net.ipv4.conf.all.rp_filter=0", "sysctl -qw net.ipv4.conf.default.rp_filter=0",
			// The egress IPv6 address is not the node's source address (the masquerade's).
			"ip -6 addr change 2001:db8:0:1::100/128 dev ext0 preferred_lft 0",
			"ip route add default via 192.0.2.2", "ip -6 route add default via 2001:db8:0:1::2",
			"ip rule add fwmark 0x10000/0xff0000 table 100", "ip route add default via 192.0.2.2 table 100",
			"ip -6 rule add fwmark 0x10000/0xff0000 table 100", "ip -6 route add default via 2001:db8:0:1::2 table 100",
			"nft add table inet cni",
			"nft add chain inet cni post { type nat hook postrouting priority srcnat ; }",
			"nft add rule inet cni post ip saddr 10.244.0.0/16 masquerade",
			"nft add rule inet cni post ip6 saddr fd00:10:244::/64 masquerade",
			"nft add table inet classifier",
			"nft add chain inet classifier pre { type filter hook prerouting priority raw ; }",
		),
		l.ext.Script("sysctl -qw net.ipv4.conf.all.rp_filter=0", "sysctl -qw net.ipv4.conf.default.rp_filter=0",
			"ip route add 10.244.0.0/16 via 192.0.2.1", "ip -6 route add fd00:10:244::/64 via 2001:db8:0:1::1"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := l.node.Do(func() (err error) { l.table, err = nft.New(); return err }); err != nil {
		t.Fatal(err)
	}
	l.node.MustRun(t, "ping", "-c1", "-W2", "192.0.2.2")
	l.node.MustRun(t, "ping", "-c1", "-W2", "2001:db8:0:1::2")
	l.pod.MustRun(t, "ping", "-c1", "-W2", "10.244.0.1")
	l.pod.MustRun(t, "ping", "-c1", "-W2", "fd00:10:244::1")
	l.seen.serve(t, l.ext, "udp4", "0.0.0.0:7777")
	l.seen.serve(t, l.ext, "udp6", "[::]:7777")
	return l
}

// mark makes the stand-in classifier mark pod's packets for steering, or not.
func (l *flowLab) mark(t *testing.T, pod netip.Addr, steer bool) {
	t.Helper()
	l.node.MustRun(t, "nft", "flush", "chain", "inet", "classifier", "pre")
	if steer {
		family := "ip"
		if pod.Is6() {
			family = "ip6"
		}
		l.node.MustRun(t, "nft", "add", "rule", "inet", "classifier", "pre", family, "saddr", pod.String(), "meta", "mark", "set", "0x10000")
	}
}

func (l *flowLab) apply(t *testing.T, s *dataplane.NftablesState) {
	t.Helper()
	if err := l.node.Do(func() error { return errFailed(l.table.Apply(s)) }); err != nil {
		t.Fatal(err)
	}
}

// flow is one UDP socket of the pod, connected: every datagram is the same conntrack entry.
type flow struct {
	c    *net.UDPConn
	name string
	n    int
}

func (l *flowLab) flow(t *testing.T, src, dst netip.Addr) *flow {
	t.Helper()
	var c *net.UDPConn
	if err := l.pod.Do(func() (err error) {
		c, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 7777)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &flow{c: c, name: src.String()}
}

// send sends one datagram of the flow and returns the source the external host saw (invalid:
// it did not arrive).
func (l *flowLab) send(t *testing.T, f *flow, wait time.Duration) netip.Addr {
	t.Helper()
	f.n++
	payload := fmt.Sprintf("%s #%d", f.name, f.n)
	if _, err := f.c.Write([]byte(payload)); err != nil {
		t.Fatal(err)
	}
	return l.seen.wait(payload, wait)
}

var (
	a        = netip.MustParseAddr
	eipO     = dataplane.Origin{Kind: "EgressIP", Name: "eip"}
	exempt   = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/64")}
	dst4     = a("203.0.113.10")
	dst6     = a("2001:db8:ff::10")
	steerNHs = []dataplane.SteerNexthop{{Mark: 0x10000, Nexthop: a("192.0.2.2")}, {Mark: 0x10000, Nexthop: a("2001:db8:0:1::2")}}
)

// TestPrivilegedGuardStopsOtherNAT: a guarded pod whose egress IP's SNAT is not in place yet
// (the egress node gets a remote pod's packets just before its SNAT element) is not
// masqueraded to the node's address by the CNI: its packets are dropped, and so that NAT does
// not stick to the flow, which leaves with the egress IP as soon as the SNAT is there.
func TestPrivilegedGuardStopsOtherNAT(t *testing.T) {
	privileged.Require(t)
	l := newFlowLab(t)
	for _, c := range []struct{ pod, dst, eip netip.Addr }{
		{a("10.244.0.5"), dst4, a("192.0.2.100")},
		{a("fd00:10:244::5"), dst6, a("2001:db8:0:1::100")},
	} {
		l.apply(t, &dataplane.NftablesState{SteerMask: 0x00ff0000, Exempt: exempt, Guarded: []netip.Addr{c.pod}})
		f := l.flow(t, c.pod, c.dst)
		if got := l.send(t, f, 500*time.Millisecond); got.IsValid() {
			t.Errorf("%s guarded, without its SNAT: arrived from %s, want dropped", c.pod, got)
		}
		l.apply(t, &dataplane.NftablesState{SteerMask: 0x00ff0000, Exempt: exempt, Guarded: []netip.Addr{c.pod},
			SNAT: []dataplane.SNAT{{Origin: eipO, Pod: c.pod, To: c.eip}}})
		if got := l.send(t, f, 2*time.Second); got != c.eip {
			t.Errorf("%s: the same flow once its SNAT is in place arrived from %v, want %s", c.pod, got, c.eip)
		}
	}
	if t.Failed() {
		t.Log(l.node.MustRun(t, "conntrack", "-L"))
	}
}

// TestPrivilegedFlowsFollowNATChanges: a flow of a pod keeps one socket (one conntrack entry)
// while the pod's NAT on the node changes as its egress IP moves: masqueraded by the CNI before
// it is selected, SNATed to the egress IP when the node hosts it, steered with its own source
// when another node does, SNATed again when it comes back. Every datagram leaves with the
// source of the current state, not the one the flow started with.
func TestPrivilegedFlowsFollowNATChanges(t *testing.T) {
	privileged.Require(t)
	l := newFlowLab(t)
	for _, c := range []struct{ pod, dst, eip, node netip.Addr }{
		{a("10.244.0.6"), dst4, a("192.0.2.100"), a("192.0.2.1")},
		{a("fd00:10:244::6"), dst6, a("2001:db8:0:1::100"), a("2001:db8:0:1::1")},
	} {
		unselected := &dataplane.NftablesState{SteerMask: 0x00ff0000, Exempt: exempt}
		here := &dataplane.NftablesState{SteerMask: 0x00ff0000, Exempt: exempt, Guarded: []netip.Addr{c.pod},
			SNAT: []dataplane.SNAT{{Origin: eipO, Pod: c.pod, To: c.eip}}}
		steered := &dataplane.NftablesState{SteerMask: 0x00ff0000, Exempt: exempt, Guarded: []netip.Addr{c.pod}, SteerNexthops: steerNHs}
		l.apply(t, unselected)
		f := l.flow(t, c.pod, c.dst)
		for i, step := range []struct {
			name  string
			state *dataplane.NftablesState
			steer bool
			want  netip.Addr
		}{
			{"not selected: the CNI's masquerade", unselected, false, c.node},
			{"selected, egress IP on this node", here, false, c.eip},
			{"egress IP moved to another node: steered", steered, true, c.pod},
			{"egress IP back on this node", here, false, c.eip},
		} {
			// In the order of the kernel Applier: the table, then the marks.
			l.apply(t, step.state)
			l.mark(t, c.pod, step.steer)
			if got := l.send(t, f, 2*time.Second); got != step.want {
				t.Errorf("%s, step %d (%s): the flow arrived from %v, want %s", c.pod, i, step.name, got, step.want)
			}
		}
	}
	if t.Failed() {
		t.Log(l.node.MustRun(t, "conntrack", "-L"))
	}
}
