package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// routedFabric makes the lab's fabric behave as a routed fabric or a cloud's source check: a
// frame carrying an IP packet whose source is a pod address and whose destination is outside
// the pod networks is dropped (and counted); pod to pod traffic and everything else cross.
// It returns a function that reads how many frames were dropped.
func routedFabric(t testing.TB, l *lab.Lab) func() int {
	t.Helper()
	v4, v6 := lab.ClusterCIDRs[0], lab.ClusterCIDRs[1]
	cmd := l.Fabric.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(fmt.Sprintf(`table bridge sourcecheck {
 chain forward {
  type filter hook forward priority 0
  ip saddr %s ip daddr != %s counter drop
  ip6 saddr %s ip6 daddr != %s counter drop
 }
}
`, v4, v4, v6, v6))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fabric source check: %v: %s", err, out)
	}
	counter := regexp.MustCompile(`counter packets (\d+)`)
	return func() int {
		n := 0
		for _, m := range counter.FindAllStringSubmatch(l.Fabric.MustRun(t, "nft", "list", "table", "bridge", "sourcecheck"), -1) {
			c, _ := strconv.Atoi(m[1])
			n += c
		}
		return n
	}
}

// TestPrivilegedEgressIPVXLAN: on a fabric that drops a packet with a pod source bound outside
// the pod networks (where direct steering cannot work), agents with --egressip-steering=vxlan
// carry a steered pod's traffic to its egress nodes through egressd's VXLAN tunnel: the web
// host sees the egress IP (IPv4 and IPv6) from selected pods on nodes that host none (routed
// and bridged CNI); an unselected pod keeps its node's IP and pod to pod keeps the pod IP; the
// IPv4 egress node losing its label moves the IP and the traffic follows through the tunnel to
// the new node; the web host never sees a pod source, and no pod-sourced packet bound outside
// even tries to cross the fabric.
func TestPrivilegedEgressIPVXLAN(t *testing.T) {
	privileged.Require(t)
	// Node 0 never hosts egress IPs; node 3, bridged, takes the IPv4 one after the move.
	l := lab.New(t, lab.Options{Nodes: 4, Agents: true, CNI: map[int]lab.CNI{3: lab.Bridged},
		NodeLabels: map[int]map[string]string{1: {assignable: ""}, 2: {assignable: ""}, 3: {assignable: ""}},
		AgentArgs:  []string{"--egressip-steering=vxlan"}})
	web, err := l.AddExternal("web", lab.ExternalOptions{}, web4.String(), web6.String())
	if err != nil {
		t.Fatal(err)
	}
	e := &eipLab{Lab: l, web: web, ns: l.CP.Namespace(t)}
	labelNamespace(t, e)
	dropped := routedFabric(t, e.Lab)
	n0, n1, n2, n3 := e.Nodes[0], e.Nodes[1], e.Nodes[2], e.Nodes[3]
	sel := lab.PodOptions{Labels: map[string]string{"app": "eip"}}
	steered := addPod(t, n0, e.ns, "steered", sel)
	bridged := addPod(t, n3, e.ns, "bridged", sel)
	plain := addPod(t, n0, e.ns, "plain", lab.PodOptions{Labels: map[string]string{"app": "other"}})
	peer := addPod(t, n1, e.ns, "peer", lab.PodOptions{Labels: map[string]string{"app": "other"}})
	if err := peer.Serve(8080); err != nil {
		t.Fatal(err)
	}
	v4, v6 := netip.MustParseAddr(eip4), netip.MustParseAddr(eip6)
	capture := e.web.Capture()
	defer capture.Stop()
	name := e.egressIP(t, "vxlan", "eip", v4, v6)
	t.Cleanup(func() { // before the EgressIP goes (cleanups run last first)
		if t.Failed() {
			dumpTunnel(t, n0, n1, n2, n3)
			dumpNodes(t, n0, n1)
			t.Logf("fabric:\n%s", e.Fabric.MustRun(t, "nft", "list", "table", "bridge", "sourcecheck"))
		}
	})
	e.waitPlaced(t, name, 20*time.Second, map[*lab.Node]netip.Addr{n1: v4, n2: v6})
	eventuallySource(t, "steered through the tunnel, IPv4", steered, webAddr(v4), v4)
	eventuallySource(t, "steered through the tunnel, IPv6", steered, webAddr(v6), v6)
	eventuallySource(t, "steered through the tunnel from the bridged node, IPv4", bridged, webAddr(v4), v4)
	eventuallySource(t, "steered through the tunnel from the bridged node, IPv6", bridged, webAddr(v6), v6)

	// The pod's node reaches both egress nodes through the tunnel: the device, a forwarding
	// entry per egress node, the steering routes on the device.
	link := n0.NS.MustRun(t, "ip", "-d", "link", "show", dataplane.TunnelDevice)
	fdb := n0.NS.MustRun(t, "bridge", "fdb", "show", "dev", dataplane.TunnelDevice)
	routes := n0.NS.MustRun(t, "ip", "route", "show", "table", "all", "proto", "229") + n0.NS.MustRun(t, "ip", "-6", "route", "show", "table", "all", "proto", "229")
	for what, want := range map[string]string{
		"device":                 "vxlan id 229 local " + n0.IPv4.String(),
		"port":                   "dstport 4799",
		"IPv4 egress node entry": "dst " + n1.IPv4.String() + " self permanent",
		"IPv6 egress node entry": "dst " + n2.IPv4.String() + " self permanent",
		"IPv4 route":             "via " + n1.IPv4.String() + " dev " + dataplane.TunnelDevice,
		"IPv6 route":             "via " + dataplane.TunnelGateway6(n2.IPv4).String() + " dev " + dataplane.TunnelDevice,
	} {
		if !strings.Contains(link+fdb+routes, want) {
			t.Errorf("%s on %s: no %q in:\n%s%s%s", what, n0.Name, want, link, fdb, routes)
		}
	}
	ctl := n0.NS.MustRun(t, egressctl(t), "egressip")
	for _, want := range []string{
		fmt.Sprintf("tunnel %s: vni 229 port 4799 local %s mac 02:e5:", dataplane.TunnelDevice, n0.IPv4),
		fmt.Sprintf("node %s (mac %s) next hops [%s]", n1.IPv4, dataplane.TunnelMAC(n1.IPv4), n1.IPv4),
		fmt.Sprintf("node %s (mac %s) next hops [%s]", n2.IPv4, dataplane.TunnelMAC(n2.IPv4), dataplane.TunnelGateway6(n2.IPv4)),
	} {
		if !strings.Contains(ctl, want) {
			t.Errorf("egressctl egressip on %s lacks %q:\n%s", n0.Name, want, ctl)
		}
	}
	for _, n := range []*lab.Node{n1, n2} {
		if _, err := n.NS.Run("ip", "link", "show", dataplane.TunnelDevice); err != nil {
			t.Errorf("egress node %s has no %s to decapsulate with: %v", n.Name, dataplane.TunnelDevice, err)
		}
	}

	// Path MTU: the tunnel's is 50 bytes under the NIC's. A full-size packet that must not be
	// fragmented gets "fragmentation needed" (1450) back from the pod's node, so TCP adapts
	// rather than stalls; one the pod may fragment gets through.
	mtu := regexp.MustCompile(`mtu ?= ?1450`)
	if out, _ := steered.NS.Run("ping", "-c2", "-W1", "-M", "do", "-s", "1472", web4.String()); !mtu.MatchString(out) {
		t.Errorf("a 1500-byte packet with DF through the tunnel: want fragmentation needed, mtu 1450:\n%s", out)
	}
	if out, err := steered.NS.Run("ping", "-c2", "-W1", "-M", "want", "-s", "1472", web4.String()); err != nil {
		t.Errorf("a 1500-byte packet the pod may fragment does not get through the tunnel: %v\n%s", err, out)
	}

	eventuallySource(t, "unselected pod", plain, webAddr(v4), n0.IPv4)
	if r := steered.TCP(lab.HostPort(peer.IPv4, 8080), lab.ClientOptions{Timeout: quick}); r.Outcome != lab.OK || r.Seen.Src != steered.IPv4 {
		t.Errorf("pod to pod: %s, want source %s", r, steered.IPv4)
	}
	if r := steered.TCP(lab.HostPort(peer.IPv6, 8080), lab.ClientOptions{Timeout: quick}); r.Outcome != lab.OK || r.Seen.Src != steered.IPv6 {
		t.Errorf("pod to pod, IPv6: %s, want source %s", r, steered.IPv6)
	}

	// Failover: the IPv4 egress node loses its label; the IP goes to n3 (n2 hosts the IPv6
	// one) and the steered traffic follows through the tunnel.
	labelNode(t, e.Lab, n1.Name, nil)
	e.waitPlaced(t, name, 20*time.Second, map[*lab.Node]netip.Addr{n3: v4, n2: v6})
	// The egress IP is the same before and after: the source proves nothing until the pod's
	// node forwards to n3 alone (the old path drops, fail closed, while the move goes on).
	poll.Eventually(t, "after the move, "+n0.Name+"'s forwarding entries name "+n3.Name+" and not "+n1.Name, 10*time.Second, func() error {
		fdb := n0.NS.MustRun(t, "bridge", "fdb", "show", "dev", dataplane.TunnelDevice)
		if !strings.Contains(fdb, "dst "+n3.IPv4.String()) || strings.Contains(fdb, "dst "+n1.IPv4.String()) {
			return fmt.Errorf("forwarding entries:\n%s", fdb)
		}
		return nil
	})
	eventuallySource(t, "after the move, IPv4", steered, webAddr(v4), v4)
	eventuallySource(t, "after the move, IPv6", steered, webAddr(v6), v6)
	eventuallySource(t, "after the move, the bridged egress node's own pod, IPv4", bridged, webAddr(v4), v4)
	eventuallySource(t, "after the move, from the bridged node through the tunnel, IPv6", bridged, webAddr(v6), v6)

	// The pod's agent (often the leader) is killed and restarted mid-stream: the tunnel stays as
	// it is (the same device, adopted), a new leader keeps the assignments, and the stream
	// goes on without a loss.
	index := strings.Fields(n0.NS.MustRun(t, "ip", "-o", "link", "show", dataplane.TunnelDevice))[0]
	var stream lab.StreamResult
	var wg sync.WaitGroup
	wg.Go(func() {
		stream, _ = steered.UDPStream(lab.HostPort(web4, lab.ServerPorts[1]), 300, 10*time.Millisecond)
	})
	time.Sleep(500 * time.Millisecond)
	n0.Agent.Kill()
	time.Sleep(500 * time.Millisecond)
	if err := n0.StartAgent(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	t.Logf("across the agent's restart (killed after datagram 50, started after 100): %s", stream)
	if stream.Lost(300) {
		t.Errorf("across the agent's restart, the steered stream lost datagrams: %s", stream)
	}
	eventuallySource(t, "after the agent's restart, IPv6", steered, webAddr(v6), v6)
	if now := strings.Fields(n0.NS.MustRun(t, "ip", "-o", "link", "show", dataplane.TunnelDevice))[0]; now != index {
		t.Errorf("the restarted agent replaced the tunnel device (ifindex %s, was %s)", now, index)
	}

	time.Sleep(200 * time.Millisecond) // the last packets in flight
	capture.Stop()
	leaks := capture.Count(func(c lab.Captured) bool { return c.ForHost && inCluster(c.Src) })
	fromEIP := capture.Count(func(c lab.Captured) bool { return c.ForHost && (c.Src == v4 || c.Src == v6) })
	t.Logf("the web host got %d packets with an egress IP and %d with a pod source; the fabric dropped %d pod-sourced frames bound outside",
		fromEIP, leaks, dropped())
	if fromEIP == 0 {
		t.Errorf("the capture saw no packet from the egress IPs: it proves nothing")
	}
	if leaks > 0 {
		t.Errorf("%d packets reached the web host with a pod source", leaks)
	}
	if n := dropped(); n > 0 {
		t.Errorf("%d frames with a pod source bound outside the pod networks met the fabric: steered traffic left a node unencapsulated", n)
	}

	// egressctl cleanup, the agent stopped, removes the tunnel device.
	if _, err := n0.Agent.Terminate(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if out, err := n0.NS.Run(egressctl(t), "cleanup", "--bpf-pin-root", lab.PinRoot(e.ID, n0.Name)); err != nil {
		t.Fatalf("egressctl cleanup: %v\n%s", err, out)
	}
	if out, err := n0.NS.Run("ip", "link", "show", dataplane.TunnelDevice); err == nil {
		t.Errorf("after egressctl cleanup, %s still has the tunnel device:\n%s", n0.Name, out)
	}
}

// TestPrivilegedEgressIPVXLANNoLeakAcrossMoves: TestPrivilegedEgressIPNoLeakAcrossMoves (20
// moves, a capture on the web host that must see no pod source) with the agents steering
// through the VXLAN tunnel across a fabric that drops pod sources; the fabric must not even
// meet a pod-sourced packet bound outside.
func TestPrivilegedEgressIPVXLANNoLeakAcrossMoves(t *testing.T) {
	privileged.Require(t)
	e := newEIPLab(t, 4, "--egressip-steering=vxlan")
	dropped := routedFabric(t, e.Lab)
	noLeakAcrossMoves(t, e)
	if n := dropped(); n > 0 {
		t.Errorf("%d frames with a pod source bound outside the pod networks met the fabric", n)
	}
}

// dumpTunnel logs what the nodes' tunnel devices hold and have carried.
func dumpTunnel(t testing.TB, nodes ...*lab.Node) {
	t.Helper()
	for _, n := range nodes {
		var b strings.Builder
		for _, cmd := range [][]string{
			{"ip", "-d", "-s", "link", "show", dataplane.TunnelDevice},
			{"ip", "addr", "show", "dev", dataplane.TunnelDevice},
			{"bridge", "fdb", "show", "dev", dataplane.TunnelDevice},
			{"ip", "neigh", "show", "dev", dataplane.TunnelDevice},
			{"ip", "-6", "route", "show", "table", "all", "proto", "229"},
			{"sysctl", "net.ipv4.conf.all.rp_filter", "net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"},
		} {
			out, err := n.NS.Run(cmd[0], cmd[1:]...)
			fmt.Fprintf(&b, "$ %s (%v)\n%s\n", strings.Join(cmd, " "), err, out)
		}
		t.Logf("%s:\n%s", n.Name, b.String())
	}
}

// BenchmarkPrivilegedEgressIPFailoverVXLAN: BenchmarkPrivilegedEgressIPFailover with the
// agents steering through the VXLAN tunnel across a fabric that drops pod sources, 20 trials.
// Run with -benchtime 1x.
func BenchmarkPrivilegedEgressIPFailoverVXLAN(b *testing.B) {
	privileged.Require(b)
	e := newEIPLab(b, 3, "--egressip-steering=vxlan")
	routedFabric(b, e.Lab)
	benchFailover(b, e, 20)
}

// TestPrivilegedEgressServiceVXLAN: EgressService's steering takes the tunnel too: on the
// fabric that drops pod sources, with --egressip-steering=vxlan, an endpoint on another node
// than the service's host leaves with the LB IP, and no pod-sourced packet meets the fabric.
func TestPrivilegedEgressServiceVXLAN(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, Agents: true, AgentArgs: []string{"--egressip-steering=vxlan"},
		NodeLabels: map[int]map[string]string{0: {"egress-host": "yes"}}})
	ctx := context.Background()
	web, err := l.AddExternal("web", lab.ExternalOptions{}, web4.String())
	if err != nil {
		t.Fatal(err)
	}
	dropped := routedFabric(t, l)
	n0 := l.Nodes[0]
	// The LB provider's job: the LB IP reaches the host node.
	if out, err := web.NS.Run("ip", "route", "add", lbIP4+"/32", "via", n0.IPv4.String()); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ns := l.CP.Namespace(t)
	ep1 := addPod(t, l.Nodes[1], ns, "ep1", lab.PodOptions{Labels: map[string]string{"app": "lb"}})
	loadBalancerEgressService(t, l, ns, "", lbIP4)
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressService", ns, "lb", "status.host", n0.Name, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	eventuallySource(t, "endpoint on another node, steered to the host through the tunnel", ep1, lab.HostPort(web4, webPort), netip.MustParseAddr(lbIP4))
	if fdb := l.Nodes[1].NS.MustRun(t, "bridge", "fdb", "show", "dev", dataplane.TunnelDevice); !strings.Contains(fdb, "dst "+n0.IPv4.String()) {
		t.Errorf("%s's tunnel has no forwarding entry to the host %s:\n%s", l.Nodes[1].Name, n0.Name, fdb)
	}
	if n := dropped(); n > 0 {
		t.Errorf("%d frames with a pod source bound outside the pod networks met the fabric", n)
	}
}
