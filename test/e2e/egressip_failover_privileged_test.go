package e2e

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressIPFailover: an egress IP leaves its node when the node turns NotReady,
// when its fabric link dies, and when its agent is killed and its health port blocked (a killed
// agent alone, whose kernel still answers with RST, is not a reason to move); each time the
// status is upstream's (the IP on the least loaded healthy node that hosts no other IP of the
// object), the web host's neighbour entry for the IP names the new node right away (the
// announcement), and a steered pod leaves with the IP again. The node recovering takes nothing
// back (no rebalancing), and a restarted agent drops the address it held while it was dead.
func TestPrivilegedEgressIPFailover(t *testing.T) {
	privileged.Require(t)
	ctx := context.Background()
	e := newEIPLab(t, 4)
	n0, n1, n2, n3 := e.Nodes[0], e.Nodes[1], e.Nodes[2], e.Nodes[3]
	if leader := leaderNode(t, e.Lab); leader != n0 {
		t.Fatalf("the leader is %s; the scenario fails egress nodes and needs it on %s", leader.Name, n0.Name)
	}
	pod := addPod(t, n0, e.ns, "steered", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	v4, v6 := netip.MustParseAddr(eip4), netip.MustParseAddr(eip6)
	name := e.egressIP(t, "failover", "eip", v4, v6)

	// Least loaded first, ties by name; one IP of the object per node.
	e.waitPlaced(t, name, 20*time.Second, map[*lab.Node]netip.Addr{n1: v4, n2: v6})
	eventuallySource(t, "initial, IPv4", pod, webAddr(v4), v4)
	eventuallySource(t, "initial, IPv6", pod, webAddr(v6), v6)

	// move injects a fault, waits for the IP to move to node to, and checks the neighbour entry
	// and the traffic; it returns when the move was seen in the status.
	move := func(step string, ip netip.Addr, fault func(), want map[*lab.Node]netip.Addr, to *lab.Node) {
		t.Helper()
		start := time.Now()
		fault()
		seen := e.waitPlaced(t, name, 20*time.Second, want)
		took := e.waitNeighbour(t, ip, mustMAC(t, to), seen, 1500*time.Millisecond)
		t.Logf("%s: %s moved to %s %s after the fault; the web host's neighbour entry switched %s after the status",
			step, ip, to.Name, seen.Sub(start).Round(time.Millisecond), took.Round(time.Millisecond))
		eventuallySource(t, step+", IPv4", pod, webAddr(v4), v4)
		eventuallySource(t, step+", IPv6", pod, webAddr(v6), v6)
	}

	// 1. The IPv4 egress node turns NotReady: IPv4 goes to n3 (n2 hosts the IPv6 one).
	placed := map[*lab.Node]netip.Addr{n3: v4, n2: v6}
	move("node NotReady", v4, func() {
		if err := n1.SetReady(ctx, false); err != nil {
			t.Fatal(err)
		}
	}, placed, n3)
	if err := n1.SetReady(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.stays(t, name, 3*time.Second, placed)
	if hasAddress(t, n1, v4) {
		t.Errorf("%s still holds %s", n1.Name, v4)
	}

	// 2. The IPv6 egress node's fabric link dies: IPv6 goes to n1 (back, and least loaded).
	placed = map[*lab.Node]netip.Addr{n3: v4, n1: v6}
	move("fabric link down", v6, func() {
		if err := n2.SetFabricLink(false); err != nil {
			t.Fatal(err)
		}
	}, placed, n1)
	if err := n2.SetFabricLink(true); err != nil {
		t.Fatal(err)
	}
	reachable(t, n0, n2, true)
	e.stays(t, name, 3*time.Second, placed)

	// 3. The IPv4 egress node's agent is killed: its kernel still answers the probes (RST), so
	// nothing moves; once its health port is blocked too, the node is silent and IPv4 moves.
	n3.Agent.Kill()
	e.stays(t, name, 3*time.Second, placed)
	placed = map[*lab.Node]netip.Addr{n2: v4, n1: v6}
	move("agent killed and health port blocked", v4, func() { blockHealth(t, n3, true) }, placed, n2)
	if hasAddress(t, n3, v4) {
		// The dead agent's node still holds the address (nothing removes it without an agent):
		// a neighbour that resolves the IP afresh gets two answers. Which one it keeps is
		// reported, not asserted (a known limit, as upstream's #6553).
		wins := map[string]int{}
		for range 5 {
			e.web.NS.Run("ip", "neigh", "del", v4.String(), "dev", "eth0")
			e.web.NS.Run("ping", "-c1", "-W1", v4.String())
			n, _ := e.web.Neighbour(v4)
			wins[n.Lladdr]++
		}
		t.Logf("%s (agent dead) still holds %s; 5 fresh resolutions by the web host: %v (%s is %s, %s is %s)",
			n3.Name, v4, wins, n2.Name, mustMAC(t, n2), n3.Name, mustMAC(t, n3))
		e.web.NS.Run("ip", "neigh", "replace", v4.String(), "lladdr", mustMAC(t, n2), "dev", "eth0", "nud", "stale")
	}
	// Recovery: the agent comes back and drops the address it kept while dead; nothing moves.
	blockHealth(t, n3, false)
	if err := n3.StartAgent(ctx); err != nil {
		t.Fatal(err)
	}
	reachable(t, n0, n3, true)
	poll.Eventually(t, n3.Name+" drops "+v4.String(), 10*time.Second, func() error {
		if hasAddress(t, n3, v4) {
			return errString("still there")
		}
		return nil
	})
	e.stays(t, name, 3*time.Second, placed)
	if n, _ := e.web.Neighbour(v4); n.Lladdr != mustMAC(t, n2) {
		t.Errorf("after %s came back, the web host's entry for %s is %+v, want %s", n3.Name, v4, n, mustMAC(t, n2))
	}
	eventuallySource(t, "after every recovery, IPv4", pod, webAddr(v4), v4)
	eventuallySource(t, "after every recovery, IPv6", pod, webAddr(v6), v6)
}

type errString string

func (e errString) Error() string { return string(e) }

// reachable waits until the leader (on node leader) judges node reachable (or not).
func reachable(t testing.TB, leader, node *lab.Node, want bool) {
	t.Helper()
	v := "0"
	if want {
		v = "1"
	}
	poll.Eventually(t, "the leader's verdict on "+node.Name, 20*time.Second, func() error {
		got, err := leader.Controller.Sample(`egressd_reachability_node_reachable{node="` + node.Name + `"}`)
		if err != nil || got != v {
			return errString("egressd_reachability_node_reachable = " + got)
		}
		return nil
	})
}
