package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane/addresses"
	"github.com/egressd/egressd/test/frr"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// clientBehindGateways adds an outside client (203.0.113.10, or 2001:db8::10 with v6) that
// reaches node-0's pods of that family through the gateways, spreading its flows over them (per
// 5-tuple), and that the gateways route back to.
func clientBehindGateways(t *testing.T, l *lab.Lab, gws []*lab.External, v6 bool) *lab.External {
	t.Helper()
	addr, ip, pods, fabric := "203.0.113.10", "ip", l.Nodes[0].PodV4.String(), func(e *lab.External) netip.Addr { return e.Fabric }
	if v6 {
		addr, ip, pods, fabric = "2001:db8::10", "ip -6", l.Nodes[0].PodV6.String(), func(e *lab.External) netip.Addr { return e.Fabric6 }
	}
	client, err := l.AddExternal("client", lab.ExternalOptions{}, addr)
	if err != nil {
		t.Fatal(err)
	}
	route := fmt.Sprintf("%s route replace %s src %s", ip, pods, addr)
	for _, gw := range gws {
		route += " nexthop via " + fabric(gw).String()
		// A gateway sends back out of the link it received on: no ICMP redirect may tell the
		// client or the node to go around it.
		if err := gw.NS.Script("sysctl -qw net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.eth0.send_redirects=0",
			fmt.Sprintf("%s route add %s via %s", ip, addr, fabric(client))); err != nil {
			t.Fatal(err)
		}
	}
	// IPv6 has no send_redirects: the client ignores them instead.
	if err := client.NS.Script("sysctl -qw net.ipv4.fib_multipath_hash_policy=1 net.ipv6.fib_multipath_hash_policy=1",
		"sysctl -qw net.ipv6.conf.all.accept_redirects=0 net.ipv6.conf.eth0.accept_redirects=0", route); err != nil {
		t.Fatal(err)
	}
	return client
}

// clientFlow is one connection of the client: its protocol and source port (a TCP and a UDP
// connection may have the same port).
type clientFlow struct {
	proto string // "tcp", "udp"
	port  uint16
}

func (f clientFlow) String() string { return fmt.Sprintf("%s/%d", f.proto, f.port) }

// usedPorts are, per client, the flows it made so far. A UDP datagram from a source port used
// less than conntrack's timeout (30 s) ago belongs to the earlier connection: it keeps that
// connection's mark (none, if it came before the gateway's return path existed), whatever
// gateway it comes through now. The kernel picks source ports at random, so such a repeat is
// rare, and roundTrips leaves it out rather than judge it as a new connection.
var usedPorts = &clientFlows{flows: map[*lab.External]map[clientFlow]bool{}}

type clientFlows struct {
	sync.Mutex
	flows map[*lab.External]map[clientFlow]bool
}

// roundTrip is one connection of the client to the pod: the gateway its request came through
// and the one its reply went back through ("" for none: straight from the node).
type roundTrip struct {
	flow           clientFlow
	request, reply string // gateway names, joined by "+" when a direction went through several
	// seen lists, when the requests went through several gateways, each request packet each
	// saw (time, source MAC): the client's own choice of both (two connections on one port)
	// shows the client's MAC at both, a request the node sent back out its own.
	seen string
	// clientSplit: the requests went through several gateways, every one from the client's
	// own MAC. The client's routing chose both (its multipath hash moved within the
	// connection), which says nothing of the node's return path.
	clientSplit bool
}

func (rt roundTrip) String() string {
	s := fmt.Sprintf("%s: request through %q, reply through %q", rt.flow, rt.request, rt.reply)
	if rt.seen != "" {
		s += "; requests seen: " + rt.seen
	}
	return s
}

// roundTrips opens n UDP and n TCP connections from the client to dst and tells, from what the
// gateways' links received, which gateway carried each direction.
func roundTrips(t *testing.T, client *lab.External, dst netip.AddrPort, gws []*lab.External, n int) []roundTrip {
	t.Helper()
	captures := make([]*lab.Capture, len(gws))
	for i, gw := range gws {
		captures[i] = gw.Capture()
	}
	clientMAC := linkMAC(t, client)
	var flows []clientFlow
	for i := range 2 * n {
		call, proto := client.UDP, "udp"
		if i%2 == 1 {
			call, proto = client.TCP, "tcp"
		}
		if r := call(dst.String(), lab.ClientOptions{Timeout: quick}); r.Outcome == lab.OK && usedPorts.fresh(client, clientFlow{proto, r.Seen.SrcPort}) {
			flows = append(flows, clientFlow{proto, r.Seen.SrcPort})
		}
	}
	// The captures read the gateways' links asynchronously: wait until each connection's two
	// directions were seen somewhere (a reply that bypassed every gateway is never seen; under
	// the race detector on a loaded machine a capture can lag by seconds).
	classify := func() (out []roundTrip, complete bool) {
		complete = true
		for _, f := range flows {
			rt := roundTrip{flow: f}
			var seen []string
			fromClient := true
			for i, c := range captures {
				request := func(p lab.Captured) bool {
					return p.ForHost && p.Proto == f.proto && p.SrcPort == f.port && p.Dst == dst.Addr()
				}
				if c.Count(request) > 0 {
					rt.request = joinName(rt.request, gws[i].Name)
				}
				for _, p := range c.Packets() {
					if request(p) {
						seen = append(seen, fmt.Sprintf("%s at %s from %s", gws[i].Name, p.At.Format("15:04:05.000"), p.MAC))
						fromClient = fromClient && strings.EqualFold(p.MAC, clientMAC)
					}
				}
				if c.Count(func(p lab.Captured) bool {
					return p.ForHost && p.Proto == f.proto && p.DstPort == f.port && p.Src == dst.Addr()
				}) > 0 {
					rt.reply = joinName(rt.reply, gws[i].Name)
				}
			}
			if strings.Contains(rt.request, "+") {
				rt.seen = strings.Join(seen, ", ")
				rt.clientSplit = fromClient
			}
			complete = complete && rt.request != "" && rt.reply != ""
			out = append(out, rt)
		}
		return out, complete
	}
	out, complete := classify()
	for deadline := time.Now().Add(5 * time.Second); !complete && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		out, complete = classify()
	}
	for _, c := range captures {
		c.Stop()
	}
	out = slices.DeleteFunc(out, func(rt roundTrip) bool {
		if rt.clientSplit {
			t.Logf("left out %s: the client's own routing split it", rt)
		}
		return rt.clientSplit
	})
	if len(out) < n {
		t.Fatalf("only %d of %d connections from the client to the pod succeeded", len(out), 2*n)
	}
	return out
}

func joinName(names, name string) string {
	if names == "" {
		return name
	}
	return names + "+" + name
}

// returnState is what decides the way of a flow's replies on node n, for a failure message:
// its conntrack mark, the return paths' map, the policy rules and the neighbours.
func returnState(t *testing.T, n *lab.Node, f clientFlow, src, dst netip.Addr) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "conntrack mark of %s: %#x\n", f, ctMarks(t, n, src, dst)[f])
	for _, cmd := range [][]string{{"nft", "list", "map", "inet", "egressd", "extroute_gateways4"}, {"ip", "rule"}, {"ip", "neigh"}} {
		out, _ := n.NS.Run(cmd[0], cmd[1:]...)
		fmt.Fprintf(&b, "%s:\n%s\n", strings.Join(cmd, " "), out)
	}
	return b.String()
}

// linkMAC is the MAC of an external host's link.
func linkMAC(t *testing.T, e *lab.External) string {
	t.Helper()
	_, after, _ := strings.Cut(e.NS.MustRun(t, "ip", "-o", "link", "show", "eth0"), "link/ether ")
	return strings.Fields(after)[0]
}

// ctMarks are node's conntrack entries of TCP and UDP connections from src to dst: the mark
// of each, by the client's flow. Read over netlink: conntrack(8)'s listing interleaves its
// stderr summary with a stdout that exceeds one buffer.
func ctMarks(t *testing.T, n *lab.Node, src, dst netip.Addr) map[clientFlow]uint32 {
	t.Helper()
	family := netlink.InetFamily(unix.AF_INET)
	if src.Is6() {
		family = unix.AF_INET6
	}
	var flows []*netlink.ConntrackFlow
	if err := n.NS.Do(func() (err error) {
		flows, err = netlink.ConntrackTableList(netlink.ConntrackTable, family)
		return err
	}); err != nil {
		t.Fatalf("list the conntrack table of %s: %v", n.Name, err)
	}
	marks := map[clientFlow]uint32{}
	for _, f := range flows {
		s, _ := netip.AddrFromSlice(f.Forward.SrcIP)
		d, _ := netip.AddrFromSlice(f.Forward.DstIP)
		if s.Unmap() != src || d.Unmap() != dst {
			continue
		}
		switch f.Forward.Protocol {
		case unix.IPPROTO_TCP:
			marks[clientFlow{"tcp", f.Forward.SrcPort}] = f.Mark
		case unix.IPPROTO_UDP:
			marks[clientFlow{"udp", f.Forward.SrcPort}] = f.Mark
		}
	}
	return marks
}

// returnLab is a node with one pod serving on 8080 in namespace ns, two gateways in front of
// the destination network dst, a client behind both, and FRR as gw2's BFD peer.
type returnLab struct {
	l      *lab.Lab
	dst    *lab.External
	gws    []*lab.External
	client *lab.External
	pod    *lab.Pod
	server netip.AddrPort
	ns     string
	peer   string // gw2's FRR peer statement
	frr    *frr.Daemons
}

func newReturnLab(t *testing.T) *returnLab {
	privileged.Require(t)
	r := &returnLab{l: lab.New(t, lab.Options{Nodes: 1, Agents: true})}
	r.dst, r.gws = gatewaysTo(t, r.l, false)
	r.client = clientBehindGateways(t, r.l, r.gws, false)
	r.peer = fmt.Sprintf("peer %s local-address %s interface eth0", r.l.Nodes[0].IPv4, r.gws[1].Fabric)
	r.frr = frr.StartBFDD(t, r.gws[1].NS, "bfd\n "+r.peer+"\n !\n!\n")
	r.ns = r.l.CP.Namespace(t)
	r.pod = addPod(t, r.l.Nodes[0], r.ns, "server", lab.PodOptions{})
	if err := r.pod.Serve(8080); err != nil {
		t.Fatal(err)
	}
	r.server = netip.AddrPortFrom(r.pod.IPv4, 8080)
	return r
}

// TestPrivilegedExternalRouteReturnPaths: connections that an outside client makes to a pod
// of a targeted namespace through the policy's gateways (spread over both) get their replies
// back through the gateway they came through (upstream's ecmp_symmetric_reply), UDP and TCP.
// When a gateway leaves the policy, the node's conntrack entries of exactly the connections it
// brought are deleted, those of the other gateway stay, and the pod's own long-lived flows that
// were on it continue through the survivor; when the survivor's BFD session goes down, its
// connections' entries go too.
func TestPrivilegedExternalRouteReturnPaths(t *testing.T) {
	r := newReturnLab(t)
	l, dst, gws, client, pod, server, peer, f, ns := r.l, r.dst, r.gws, r.client, r.pod, r.server, r.peer, r.frr, r.ns
	name := "gws-" + ns
	policy := func(hops ...*lab.External) string {
		doc := fmt.Sprintf(`apiVersion: k8s.ovn.org/v1
kind: AdminPolicyBasedExternalRoute
metadata: {name: %s}
spec:
  from:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: %s}
  nextHops:
    static:
`, name, ns)
		for _, h := range hops {
			doc += fmt.Sprintf("    - {ip: %q, bfdEnabled: %t}\n", h.Fabric, h == gws[1])
		}
		return doc
	}
	applyAndWait(t, l, "", policy(gws...), "Success")
	t.Cleanup(func() { _ = l.Kube.Delete(t.Context(), "k8s.ovn.org/v1", "AdminPolicyBasedExternalRoute", "", name) })

	// Every reply goes back through the gateway its request came through, and the node's
	// entries of these connections carry the mark of their gateway (a reply may take the right
	// gateway by the node's default route alone while the return paths are not programmed yet:
	// gw2's after its BFD session came up, each after its MAC was resolved).
	var byGateway map[string]map[clientFlow]uint32
	poll.Eventually(t, "every reply back through the gateway its request came through, both gateways used, each connection marked", 15*time.Second, func() error {
		trips := roundTrips(t, client, server, gws, 12)
		used := map[string]int{}
		for _, rt := range trips {
			if rt.request == "" || rt.reply != rt.request {
				return fmt.Errorf("%s (of %d connections)", rt, len(trips))
			}
			used[rt.request]++
		}
		if used["gw1"] == 0 || used["gw2"] == 0 {
			return fmt.Errorf("the client's connections came through %v only", used)
		}
		marks := ctMarks(t, l.Nodes[0], client.Addrs[0], pod.IPv4)
		byGateway = map[string]map[clientFlow]uint32{"gw1": {}, "gw2": {}}
		for _, rt := range trips {
			m, ok := marks[rt.flow]
			if !ok || m == 0 {
				return fmt.Errorf("no marked conntrack entry of the client's %s (entries %v)", rt.flow, marks)
			}
			byGateway[rt.request][rt.flow] = m
		}
		return nil
	})

	// The pod's own long-lived flows, spread over both gateways.
	var streams []*lab.Stream
	for range 6 {
		s, err := pod.StreamUDP("192.0.2.50:80", 20*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop() })
		streams = append(streams, s)
	}

	// gw1 leaves the policy.
	applyAndWait(t, l, "", policy(gws[1]), "Success")
	poll.Eventually(t, "the entries of gw1's connections deleted, gw2's kept", 5*time.Second, func() error {
		now := ctMarks(t, l.Nodes[0], client.Addrs[0], pod.IPv4)
		for f := range byGateway["gw1"] {
			if _, ok := now[f]; ok {
				return fmt.Errorf("the entry of %s (through gw1) is still there", f)
			}
		}
		for f, m := range byGateway["gw2"] {
			if now[f] != m {
				return fmt.Errorf("the entry of %s (through gw2, mark %#x) is gone or changed: %#x", f, m, now[f])
			}
		}
		return nil
	})
	// At least gw1's connections' entries were deleted (a restarted agent also flushes entries
	// whose mark is no longer a live gateway's, none here), and one gateway went: counted once
	// both families' entries are gone, which may come after the entries the test looked at.
	for series, least := range map[string]int{
		"egressd_externalroute_conntrack_deleted_total": len(byGateway["gw1"]), "egressd_externalroute_gateway_removals_total": 1} {
		poll.Eventually(t, series, 5*time.Second, func() error {
			v, err := l.Nodes[0].Agent.Sample(series)
			if n, _ := strconv.Atoi(v); err != nil || n < least {
				return fmt.Errorf("%q (%v), want >= %d", v, err, least)
			}
			return nil
		})
	}
	before := make([]int64, len(streams))
	for i, s := range streams {
		_, before[i] = s.Counts()
	}
	capture := dst.Capture()
	defer capture.Stop()
	gw2MAC := linkMAC(t, gws[1])
	since := time.Now()
	poll.Eventually(t, "every long-lived flow of the pod answered through gw2", 5*time.Second, func() error {
		for i, s := range streams {
			if _, answered := s.Counts(); answered < before[i]+10 {
				return fmt.Errorf("stream %d: %d answers since gw1 left", i, answered-before[i])
			}
			port := s.LocalPort()
			if n := capture.Count(func(p lab.Captured) bool {
				return p.At.After(since) && p.SrcPort == port && p.MAC != gw2MAC
			}); n > 0 {
				return fmt.Errorf("stream %d: %d packets at the destination not through gw2", i, n)
			}
		}
		return nil
	})
	// The client's connections that come through gw2 still return through it.
	for _, rt := range roundTrips(t, client, server, gws, 12) {
		if rt.request == "gw2" && rt.reply != "gw2" {
			t.Errorf("%s: request through gw2, reply through %q", rt.flow, rt.reply)
		}
	}

	// gw2's BFD session goes down (FRR shuts the peer): the entries of its connections go too.
	var gw2Mark uint32
	for _, m := range byGateway["gw2"] {
		gw2Mark = m
	}
	if err := f.Configure(peer, "shutdown"); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "the entries of gw2's connections deleted after its BFD session went down", 5*time.Second, func() error {
		for f, m := range ctMarks(t, l.Nodes[0], client.Addrs[0], pod.IPv4) {
			if m == gw2Mark {
				return fmt.Errorf("the entry of %s still carries gw2's mark %#x", f, m)
			}
		}
		return nil
	})
}

// TestPrivilegedExternalRouteGatewayMAC: a gateway that changes its MAC (as a gateway that
// migrates does) and announces it with a gratuitous ARP keeps receiving the pods' traffic at
// its new MAC, and the connections it brings keep returning through it.
func TestPrivilegedExternalRouteGatewayMAC(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 1, Agents: true})
	_, gws := gatewaysTo(t, l, false)
	client := clientBehindGateways(t, l, gws, false)
	ns := l.CP.Namespace(t)
	pod := addPod(t, l.Nodes[0], ns, "server", lab.PodOptions{})
	if err := pod.Serve(8080); err != nil {
		t.Fatal(err)
	}
	server := netip.AddrPortFrom(pod.IPv4, 8080)
	gatewayPolicy(t, l, ns, fmt.Sprintf(`    static:
    - {ip: %q}
    - {ip: %q}
`, gws[0].Fabric, gws[1].Fabric))
	// Both directions use each gateway at the MAC it has.
	works := func(mac1 string) func() error {
		return func() error {
			macs, _ := gatewaysSeen(t, pod, "192.0.2.50:80", 24)
			if macs[mac1] == 0 || macs[linkMAC(t, gws[1])] == 0 || macs[mac1]+macs[linkMAC(t, gws[1])] != 24 {
				return fmt.Errorf("the pod's flows reached the destination from %v (gw1 %s)", macs, mac1)
			}
			used := map[string]int{}
			for _, rt := range roundTrips(t, client, server, gws, 12) {
				if rt.request == "" || rt.reply != rt.request {
					return fmt.Errorf("%s", rt)
				}
				used[rt.request]++
			}
			if used["gw1"] == 0 {
				return fmt.Errorf("the client's connections came through %v only", used)
			}
			return nil
		}
	}
	old := linkMAC(t, gws[0])
	poll.Eventually(t, "both gateways used, both ways", 15*time.Second, works(old))

	const moved = "02:00:00:00:be:ef"
	gws[0].NS.MustRun(t, "ip", "link", "set", "eth0", "address", moved)
	if err := gws[0].NS.Do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		return addresses.Announce(ifi, gws[0].Fabric)
	}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "gw1 used at its new MAC, both ways, after its gratuitous ARP", 5*time.Second, works(moved))
}

// TestPrivilegedExternalRouteRestartKeepsBFDGateway: the agent restarts while connections come
// in through a BFD-gated gateway and through a plain one. The new agent's BFD session starts
// Down; until it comes up the gateway stays in use on the previous agent's word (the kernel's
// nexthop group): no entry of its connections is deleted or changed, before the session is up
// nor after. Once its own session is up, the gateway going down is still noticed at once.
func TestPrivilegedExternalRouteRestartKeepsBFDGateway(t *testing.T) {
	r := newReturnLab(t)
	l, gws, client, pod, server, peer, f := r.l, r.gws, r.client, r.pod, r.server, r.peer, r.frr
	gatewayPolicy(t, l, r.ns, fmt.Sprintf("    static:\n    - {ip: %q}\n    - {ip: %q, bfdEnabled: true}\n", gws[0].Fabric, gws[1].Fabric))

	var marked map[clientFlow]uint32 // the connections through gw2 (BFD), with their marks
	poll.Eventually(t, "connections through both gateways, each marked", 15*time.Second, func() error {
		trips := roundTrips(t, client, server, gws, 12)
		marks := ctMarks(t, l.Nodes[0], client.Addrs[0], pod.IPv4)
		marked = map[clientFlow]uint32{}
		used := map[string]int{}
		for _, rt := range trips {
			if rt.request == "" || rt.reply != rt.request {
				return fmt.Errorf("%s", rt)
			}
			used[rt.request]++
			if m := marks[rt.flow]; m == 0 {
				return fmt.Errorf("no marked conntrack entry of %s", rt.flow)
			} else if rt.request == "gw2" {
				marked[rt.flow] = m
			}
		}
		if used["gw1"] == 0 || used["gw2"] == 0 {
			return fmt.Errorf("the client's connections came through %v only", used)
		}
		return nil
	})
	kept := func() error {
		now := ctMarks(t, l.Nodes[0], client.Addrs[0], pod.IPv4)
		for f, m := range marked {
			if now[f] != m {
				return fmt.Errorf("the entry of %s (through gw2, mark %#x) is gone or changed: %#x", f, m, now[f])
			}
		}
		return nil
	}

	n := l.Nodes[0]
	n.Agent.Kill()
	time.Sleep(300 * time.Millisecond)
	restarted := time.Now()
	if err := n.StartAgent(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Through the new session's coming up and past the grace on the previous agent's word.
	sessionUp := false
	for time.Since(restarted) < 7*time.Second {
		if err := kept(); err != nil {
			t.Fatalf("%s after the restart: %v", time.Since(restarted).Round(time.Millisecond), err)
		}
		if v, _ := n.Agent.Sample(`egressd_bfd_sessions{state="Up"}`); v == "1" && !sessionUp {
			sessionUp = true
			t.Logf("the new agent's BFD session to gw2 up %s after the restart", time.Since(restarted).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !sessionUp {
		t.Fatal("the new agent's BFD session to gw2 never came up")
	}
	for _, series := range []string{"egressd_externalroute_conntrack_deleted_total", "egressd_externalroute_gateway_removals_total"} {
		if v, err := n.Agent.Sample(series); err != nil || (v != "" && v != "0") {
			t.Errorf("new agent: %s = %q (%v), want none", series, v, err)
		}
	}
	for _, rt := range roundTrips(t, client, server, gws, 12) {
		if rt.request != rt.reply {
			t.Errorf("after the restart, %s\n%s", rt, returnState(t, n, rt.flow, client.Addrs[0], pod.IPv4))
		}
	}

	// Its own session judges it now: gw2 going down is noticed.
	if err := f.Configure(peer, "shutdown"); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "the entries of gw2's connections deleted after its BFD session went down", 5*time.Second, func() error {
		now := ctMarks(t, n, client.Addrs[0], pod.IPv4)
		for f, m := range marked {
			if now[f] == m {
				return fmt.Errorf("the entry of %s still carries gw2's mark %#x", f, m)
			}
		}
		return nil
	})
}

// fresh records f as used by client and reports whether it was not before.
func (u *clientFlows) fresh(client *lab.External, f clientFlow) bool {
	u.Lock()
	defer u.Unlock()
	if u.flows[client] == nil {
		u.flows[client] = map[clientFlow]bool{}
	}
	seen := u.flows[client][f]
	u.flows[client][f] = true
	return !seen
}
