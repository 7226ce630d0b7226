package tunnel

import (
	"fmt"
	"net/netip"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/routing"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// pair is two nodes on one underlay link (10.7.0.1/24 and .2, fd07::1/64 and ::2) that drops a
// packet whose source is a "pod" (10.99.0.0/16, fd99::/64) as a routed fabric or a cloud
// does: a's pod address reaches b's destinations (203.0.113.9, 2001:db8:9::9, on b's lo)
// only encapsulated. b routes the pod addresses back to a directly (replies are not pod
// sourced), as the CNI's own routes do.
type pair struct {
	a, b *netns.NS
}

const (
	podSrc4, podSrc6 = "10.99.0.1", "fd99::1"
	dst4, dst6       = "203.0.113.9", "2001:db8:9::9"
	// dst4ECMP is routed by an onlink nexthop object (as ECMP over egress nodes is).
	dst4ECMP = "203.0.113.10"
)

func newPair(t *testing.T) *pair {
	t.Helper()
	privileged.Require(t)
	p := &pair{a: netns.New(t, "vxa"), b: netns.New(t, "vxb")}
	for _, ns := range []*netns.NS{p.a, p.b} {
		if err := ns.Script("sysctl -qw net.ipv6.conf.all.accept_dad=0", "sysctl -qw net.ipv6.conf.default.accept_dad=0",
			"sysctl -qw net.ipv4.conf.all.rp_filter=1"); err != nil { // strict, as many distributions
			t.Fatal(err)
		}
	}
	netns.Veth(t, p.a, "u0", p.b, "u0")
	p.a.Addr(t, "u0", "10.7.0.1/24", "fd07::1/64")
	p.b.Addr(t, "u0", "10.7.0.2/24", "fd07::2/64")
	p.a.Addr(t, "lo", podSrc4+"/32", podSrc6+"/128")
	p.b.Addr(t, "lo", dst4+"/32", dst4ECMP+"/32", dst6+"/128")
	if err := p.b.Script("ip route add 10.99.0.0/16 via 10.7.0.1", "ip -6 route add fd99::/64 via fd07::1"); err != nil {
		t.Fatal(err)
	}
	// a's main table routes b's destinations directly (what direct steering does).
	if err := p.a.Script("ip route add "+dst4+" via 10.7.0.2", "ip route add "+dst4ECMP+" via 10.7.0.2", "ip -6 route add "+dst6+" via fd07::2"); err != nil {
		t.Fatal(err)
	}
	cmd := p.b.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(`table inet underlay {
 chain pre {
  type filter hook prerouting priority -300
  iifname "u0" ip saddr 10.99.0.0/16 counter drop
  iifname "u0" ip6 saddr fd99::/64 counter drop
  iifname "u0" udp dport 4799 ip dscp ef counter
 }
}
`)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	return p
}

var (
	nodeA = dataplane.Origin{Kind: "Node", Name: "a"}
	nodeB = dataplane.Origin{Kind: "Node", Name: "b"}
	eip   = dataplane.Origin{Kind: "EgressIP", Name: "eip"}
)

// gw6 is b's IPv6 gateway on the tunnel, fe80::e5:a07:2 (EUI-64 of 02:e5:0a:07:00:02).
var gw6 = dataplane.TunnelGateway6(netip.MustParseAddr("10.7.0.2"))

// sender is a's tunnel state: peer b reached at 10.7.0.2, its next hops 10.7.0.2 and gw6.
func sender() *dataplane.TunnelState {
	a := netip.MustParseAddr
	return &dataplane.TunnelState{Origin: nodeA, Local: a("10.7.0.1"), Peers: []dataplane.TunnelPeer{
		{Origin: nodeB, Underlay: a("10.7.0.2"), Nexthops: []netip.Addr{a("10.7.0.2"), gw6}}}}
}

// steering routes a's packets marked steerMark (the classifier's mark in production) to b's
// destinations through the tunnel: dst4 by a single onlink gateway, dst4ECMP and dst6 by
// nexthop objects (groups, as ECMP over egress nodes is).
func steering() *dataplane.RoutingState {
	a, pf := netip.MustParseAddr, netip.MustParsePrefix
	via4 := dataplane.Nexthop{Gateway: a("10.7.0.2"), Device: dataplane.TunnelDevice, Onlink: true}
	via6 := dataplane.Nexthop{Gateway: gw6, Device: dataplane.TunnelDevice}
	return &dataplane.RoutingState{
		Rules: []dataplane.RouteRule{
			{Origin: eip, Priority: 1, Mark: steerMark, Mask: dataplane.DefaultMarkMask, Table: 1},
			{Origin: eip, Priority: 1, IPv6: true, Mark: steerMark, Mask: dataplane.DefaultMarkMask, Table: 1},
		},
		Tables: []dataplane.RouteTable{{Origin: eip, ID: 1, Routes: []dataplane.Route{
			{Dst: pf(dst4 + "/32"), Via: &via4},
			{Dst: pf(dst4ECMP + "/32"), Nexthops: []dataplane.Nexthop{via4}},
			{Dst: pf(dst6 + "/128"), Nexthops: []dataplane.Nexthop{via6}},
		}}},
	}
}

// apply runs New (a fresh agent: whatever is in the kernel is adopted), Apply and Prune in ns,
// with /proc/sys read-only as the agent's container sees it.
func apply(t *testing.T, ns *netns.NS, cfg Config, s *dataplane.TunnelState) {
	t.Helper()
	err := ns.Do(func() error {
		if err := privileged.ReadOnlyProcSys(); err != nil {
			return err
		}
		tun, err := New(cfg)
		if err != nil {
			return err
		}
		defer tun.Close()
		for o, err := range tun.Apply(s) {
			t.Errorf("apply: %v: %v", o, err)
		}
		return tun.Prune(s)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func route(t *testing.T, ns *netns.NS, s *dataplane.RoutingState) {
	t.Helper()
	err := ns.Do(func() error {
		r, err := routing.New(routing.Config{})
		if err != nil {
			return err
		}
		defer r.Close()
		for o, err := range r.Apply(s, nil) {
			t.Errorf("routing: %v: %v", o, err)
		}
		return r.Prune(s)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// steerMark selects the steering table.
const steerMark = 0x10000

// reaches reports whether a steered packet with a pod source of a reaches b's destinations of
// each family (and its reply comes back).
func (p *pair) reaches(t *testing.T) (v4, v6 bool) {
	t.Helper()
	mark := fmt.Sprint(steerMark)
	_, err4 := p.a.Run("ping", "-c1", "-W1", "-m", mark, "-I", podSrc4, dst4)
	if _, err := p.a.Run("ping", "-c1", "-W1", "-m", mark, "-I", podSrc4, dst4ECMP); err4 == nil {
		err4 = err
	}
	_, err6 := p.a.Run("ping", "-6", "-c1", "-W1", "-m", mark, "-I", podSrc6, dst6)
	return err4 == nil, err6 == nil
}

// show is what iproute2 says of the tunnel in ns: the device's details, its forwarding
// entries and neighbours.
func show(t *testing.T, ns *netns.NS) string {
	t.Helper()
	out, _ := ns.Run("ip", "-d", "link", "show", dataplane.TunnelDevice)
	fdb, _ := ns.Run("bridge", "fdb", "show", "dev", dataplane.TunnelDevice)
	neigh, _ := ns.Run("ip", "neigh", "show", "dev", dataplane.TunnelDevice, "nud", "permanent")
	return out + fdb + neigh
}

func expectContains(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s: no %q in:\n%s", what, w, got)
		}
	}
}

func TestPrivilegedTunnel(t *testing.T) {
	p := newPair(t)
	if v4, v6 := p.reaches(t); v4 || v6 {
		t.Fatalf("pod sources reach b routed directly (v4 %v, v6 %v): the underlay lets them through, the test proves nothing", v4, v6)
	}
	apply(t, p.b, Config{}, &dataplane.TunnelState{Origin: nodeB, Local: netip.MustParseAddr("10.7.0.2")}) // receives only
	apply(t, p.a, Config{}, sender())
	route(t, p.a, steering())
	got := show(t, p.a)
	expectContains(t, "a's tunnel", got,
		"link/ether 02:e5:0a:07:00:01", "vxlan id 229 local 10.7.0.1", "dstport 4799", "nolearning", "tos inherit",
		"02:e5:0a:07:00:02 dst 10.7.0.2 self permanent",
		"10.7.0.2 lladdr 02:e5:0a:07:00:02 PERMANENT", "fe80::e5:aff:fe07:2 lladdr 02:e5:0a:07:00:02 PERMANENT")
	var info *Info
	if err := p.a.Do(func() (err error) { info, err = Inspect(); return err }); err != nil {
		t.Fatal(err)
	}
	wantInfo := &Info{VNI: 229, Port: 4799, Local: netip.MustParseAddr("10.7.0.1"), MAC: "02:e5:0a:07:00:01",
		Peers: []PeerInfo{{MAC: "02:e5:0a:07:00:02", Underlay: netip.MustParseAddr("10.7.0.2"), Nexthops: []netip.Addr{netip.MustParseAddr("10.7.0.2"), gw6}}}}
	if !reflect.DeepEqual(info, wantInfo) {
		t.Errorf("Inspect: %+v, want %+v", info, wantInfo)
	}
	expectContains(t, "b's tunnel", show(t, p.b), "link/ether 02:e5:0a:07:00:02", "vxlan id 229 local 10.7.0.2")
	expectContains(t, "b's tunnel addresses", p.b.MustRun(t, "ip", "-4", "addr", "show", "dev", dataplane.TunnelDevice), "inet 169.254.229.1/32 scope link")
	if rp := p.b.MustRun(t, "sysctl", "-n", "net.ipv4.conf."+dataplane.TunnelDevice+".rp_filter"); strings.TrimSpace(rp) != "2" {
		t.Errorf("b's rp_filter on the tunnel device is %s, want 2 (loose)", rp)
	}
	if v4, v6 := p.reaches(t); !v4 || !v6 {
		t.Errorf("through the tunnel: pod sources reach b: v4 %v, v6 %v; want both", v4, v6)
	}
	// The inner packet's DSCP (EF) is the outer header's too.
	p.a.MustRun(t, "ping", "-c1", "-W1", "-Q", "184", "-m", fmt.Sprint(steerMark), "-I", podSrc4, dst4)
	if out := p.b.MustRun(t, "nft", "list", "table", "inet", "underlay"); !regexp.MustCompile(`dscp ef counter packets [1-9]`).MatchString(out) {
		t.Errorf("no encapsulated packet with DSCP EF reached b:\n%s", out)
	}

	// The routes through the tunnel, onlink where IPv4; a second routing Apply, by a restarted
	// agent, keeps them as they are.
	nexthops := p.a.MustRun(t, "ip", "nexthop")
	expectContains(t, "a's nexthop objects", nexthops, "via 10.7.0.2 dev egressd-vxlan scope link proto 229 onlink", "via "+gw6.String()+" dev egressd-vxlan scope link proto 229")
	route(t, p.a, steering())
	if again := p.a.MustRun(t, "ip", "nexthop"); again != nexthops {
		t.Errorf("routing re-apply changed the nexthop objects:\n%s\nwas:\n%s", again, nexthops)
	}

	// A second Apply, by a restarted agent, adopts everything as it is.
	index := strings.Fields(p.a.MustRun(t, "ip", "-o", "link", "show", dataplane.TunnelDevice))[0]
	apply(t, p.a, Config{}, sender())
	if again := show(t, p.a); again != got {
		t.Errorf("re-apply changed the tunnel:\n%s\nwas:\n%s", again, got)
	}
	if now := strings.Fields(p.a.MustRun(t, "ip", "-o", "link", "show", dataplane.TunnelDevice))[0]; now != index {
		t.Errorf("re-apply recreated the device (ifindex %s, was %s)", now, index)
	}

	// Peer gone: its entries go, the device stays; the pod sources no longer get through.
	apply(t, p.a, Config{}, &dataplane.TunnelState{Origin: nodeA, Local: netip.MustParseAddr("10.7.0.1")})
	gone := show(t, p.a)
	if strings.Contains(gone, "02:e5:0a:07:00:02") || !strings.Contains(gone, "vxlan id 229") {
		t.Errorf("after the peer left, want the device without its entries:\n%s", gone)
	}
	if v4, v6 := p.reaches(t); v4 || v6 {
		t.Errorf("without the peer's entries, pod sources still reach b (v4 %v, v6 %v)", v4, v6)
	}

	// Another VNI and port: the device is replaced, and traffic flows once both ends agree.
	cfg := Config{VNI: 4242, Port: 4243}
	apply(t, p.a, cfg, sender())
	apply(t, p.b, cfg, &dataplane.TunnelState{Origin: nodeB, Local: netip.MustParseAddr("10.7.0.2")})
	route(t, p.a, steering()) // the kernel removed the routes through the replaced device
	expectContains(t, "a's tunnel, reconfigured", show(t, p.a), "vxlan id 4242", "dstport 4243", "02:e5:0a:07:00:02 dst 10.7.0.2")
	if v4, v6 := p.reaches(t); !v4 || !v6 {
		t.Errorf("reconfigured tunnel: v4 %v, v6 %v; want both", v4, v6)
	}

	// No tunnel wanted: the device goes; cleanup removes b's.
	apply(t, p.a, cfg, &dataplane.TunnelState{})
	if out, err := p.a.Run("ip", "link", "show", dataplane.TunnelDevice); err == nil {
		t.Errorf("device still there after a state without a tunnel:\n%s", out)
	}
	if err := p.b.Do(Cleanup); err != nil {
		t.Fatal(err)
	}
	if out, err := p.b.Run("ip", "link", "show", dataplane.TunnelDevice); err == nil {
		t.Errorf("device still there after Cleanup:\n%s", out)
	}
}

// On IPv6-only nodes the tunnel runs over IPv6: the device's local address, the forwarding
// entry's destination and the MACs (hashed) come from the IPv6 underlay.
func TestPrivilegedTunnelIPv6Underlay(t *testing.T) {
	p := newPair(t)
	a := netip.MustParseAddr
	local, peer := a("fd07::1"), a("fd07::2")
	gw := dataplane.TunnelGateway6(peer)
	apply(t, p.b, Config{}, &dataplane.TunnelState{Origin: nodeB, Local: peer})
	apply(t, p.a, Config{}, &dataplane.TunnelState{Origin: nodeA, Local: local, Peers: []dataplane.TunnelPeer{
		{Origin: nodeB, Underlay: peer, Nexthops: []netip.Addr{gw}}}})
	s := steering()
	s.Tables[0].Routes = []dataplane.Route{{Dst: netip.MustParsePrefix(dst6 + "/128"), Via: &dataplane.Nexthop{Gateway: gw, Device: dataplane.TunnelDevice}}}
	route(t, p.a, s)
	mac := dataplane.TunnelMAC(peer).String()
	expectContains(t, "a's tunnel", show(t, p.a), "vxlan id 229 local fd07::1", "link/ether "+dataplane.TunnelMAC(local).String(),
		mac+" dst fd07::2 self permanent", gw.String()+" lladdr "+mac+" PERMANENT")
	if _, v6 := p.reaches(t); !v6 {
		t.Errorf("through the IPv6 tunnel: the pod source does not reach b")
	}
}
