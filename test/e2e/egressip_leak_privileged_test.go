package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressIPNoLeakAcrossMoves: pods on a node that never hosts egress IPs and on
// an egress node stream UDP to the web host, over IPv4 and IPv6, through 20 moves of the egress
// IPs (label removed, NotReady, fabric link down, in turn); a capture on the web host sees not
// one packet whose source is a pod address, nor any of the streams with another source than
// their egress IP, and after every move every stream (one socket each: one conntrack entry)
// arrives again with its egress IP from its current egress node.
func TestPrivilegedEgressIPNoLeakAcrossMoves(t *testing.T) {
	privileged.Require(t)
	noLeakAcrossMoves(t, newEIPLab(t, 4))
}

// noLeakAcrossMoves is the scenario of TestPrivilegedEgressIPNoLeakAcrossMoves in the lab e of 4
// nodes.
func noLeakAcrossMoves(t *testing.T, e *eipLab) {
	ctx := context.Background()
	n0, n1 := e.Nodes[0], e.Nodes[1]
	if leader := leaderNode(t, e.Lab); leader != n0 {
		t.Fatalf("the leader is %s; the scenario fails egress nodes and needs it on %s", leader.Name, n0.Name)
	}
	sel := lab.PodOptions{Labels: map[string]string{"app": "eip"}}
	steered := addPod(t, n0, e.ns, "steered", sel)
	local := addPod(t, n1, e.ns, "local", sel)
	v4, v6 := netip.MustParseAddr(eip4), netip.MustParseAddr(eip6)
	name := e.egressIP(t, "noleak", "eip", v4, v6)
	e.waitPlaced(t, name, 20*time.Second, map[*lab.Node]netip.Addr{n1: v4, e.Nodes[2]: v6})
	eventuallySource(t, "initial, IPv4", steered, webAddr(v4), v4)
	eventuallySource(t, "initial, IPv6", steered, webAddr(v6), v6)
	eventuallySource(t, "initial, IPv4", local, webAddr(v4), v4)
	eventuallySource(t, "initial, IPv6", local, webAddr(v6), v6)

	capture := e.web.Capture()
	defer capture.Stop()
	// Each flow has its own destination port: SNAT may change source ports.
	type flow struct {
		pod    *lab.Pod
		ip     netip.Addr
		port   uint16
		stream *lab.Stream
	}
	var flows []flow
	for i, p := range []*lab.Pod{steered, local} {
		port := lab.ServerPorts[i]
		for _, ip := range []netip.Addr{v4, v6} {
			dst := lab.HostPort(web4, port)
			if ip.Is6() {
				dst = lab.HostPort(web6, port)
			}
			s, err := p.StreamUDP(dst, 5*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Stop()
			flows = append(flows, flow{p, ip, port, s})
		}
	}
	fromFlow := func(f flow, src netip.Addr, mac string) func(lab.Captured) bool {
		return func(c lab.Captured) bool {
			return c.ForHost && c.Proto == "udp" && c.DstPort == f.port && c.Src.Is4() == f.ip.Is4() && c.Src == src && (mac == "" || c.MAC == mac)
		}
	}
	for _, f := range flows {
		if _, ok := capture.Await(time.Now(), 5*time.Second, fromFlow(f, f.ip, "")); !ok {
			t.Fatalf("%s's stream to %s does not arrive with %s", f.pod.Name, webAddr(f.ip), f.ip)
		}
	}

	causes := []string{"label removed", "NotReady", "fabric link down"}
	for i := range 20 {
		ip := v4
		if i%2 == 1 {
			ip = v6
		}
		from := e.node(e.nodeOf(t, name, ip))
		cause := causes[(i/2)%len(causes)]
		start := time.Now()
		switch cause {
		case "label removed":
			labelNode(t, e.Lab, from.Name, nil)
		case "NotReady":
			if err := from.SetReady(ctx, false); err != nil {
				t.Fatal(err)
			}
		case "fabric link down":
			if err := from.SetFabricLink(false); err != nil {
				t.Fatal(err)
			}
		}
		var to *lab.Node
		poll.Eventually(t, fmt.Sprintf("move %d (%s): %s leaves %s", i, cause, ip, from.Name), 20*time.Second, func() error {
			n := e.nodeOf(t, name, ip)
			if n == "" || n == from.Name {
				return fmt.Errorf("on %q", n)
			}
			to = e.node(n)
			return nil
		})
		moved := time.Since(start)
		mac := mustMAC(t, to)
		for _, f := range flows {
			// Every stream, long-lived as it is, leaves with its egress IP from its current egress
			// node again (the moved family through the new node).
			node := e.node(e.nodeOf(t, name, f.ip))
			if _, ok := capture.Await(start, 5*time.Second, fromFlow(f, f.ip, mustMAC(t, node))); !ok {
				t.Errorf("move %d (%s): %s's stream (%s family) no longer arrives with %s from %s", i, cause, f.pod.Name, f.ip, f.ip, node.Name)
			}
			if f.pod == steered && f.ip == ip {
				got, ok := capture.Await(start, 10*time.Second, fromFlow(f, ip, mac))
				if !ok {
					seen := map[string]int{}
					for _, c := range capture.Packets() {
						if c.At.After(start) && c.ForHost && c.DstPort == f.port && c.Src.Is4() == f.ip.Is4() {
							seen[c.Src.String()+" from "+c.MAC]++
						}
					}
					t.Logf("the stream's packets since the fault: %v", seen)
					if !t.Failed() {
						dumpNodes(t, n0, from, to)
					}
					t.Errorf("move %d (%s): the steered pod's stream does not arrive with %s from %s", i, cause, ip, to.Name)
					continue
				}
				t.Logf("move %d (%s): %s %s -> %s in %s (status), stream back through %s after %s",
					i, cause, ip, from.Name, to.Name, moved.Round(time.Millisecond), to.Name, got.At.Sub(start).Round(time.Millisecond))
			}
		}
		// The node recovers; nothing moves back.
		empty := ""
		switch cause {
		case "label removed":
			labelNode(t, e.Lab, from.Name, &empty)
		case "NotReady":
			if err := from.SetReady(ctx, true); err != nil {
				t.Fatal(err)
			}
		case "fabric link down":
			if err := from.SetFabricLink(true); err != nil {
				t.Fatal(err)
			}
			reachable(t, n0, from, true)
		}
	}
	time.Sleep(200 * time.Millisecond) // the last packets in flight
	capture.Stop()
	for _, f := range flows {
		sent, answered := f.stream.Stop()
		wrong := capture.Count(func(c lab.Captured) bool {
			return c.ForHost && c.Proto == "udp" && c.DstPort == f.port && c.Src.Is4() == f.ip.Is4() && c.Src != f.ip
		})
		right := capture.Count(fromFlow(f, f.ip, ""))
		t.Logf("%s (on %s), %s family, port %d: %d sent, %d answered; the web host got %d with %s, %d with another source",
			f.pod.Name, f.pod.Node.Name, f.ip, f.port, sent, answered, right, f.ip, wrong)
		// Drop rather than leak: not with the pod's address, nor with a node's (the CNI's
		// masquerade).
		if wrong > 0 {
			t.Errorf("%s's stream (%s family): %d datagrams reached the web host with another source than %s", f.pod.Name, f.ip, wrong, f.ip)
		}
	}
	leaks := capture.Count(func(c lab.Captured) bool { return c.ForHost && inCluster(c.Src) })
	flooded := capture.Count(func(c lab.Captured) bool { return !c.ForHost && inCluster(c.Src) })
	t.Logf("captured %d packets for the web host (and %d flooded frames to other MACs with a pod source, steered traffic on its way to an egress node)",
		capture.Count(func(c lab.Captured) bool { return c.ForHost }), flooded)
	if leaks > 0 {
		for _, c := range capture.Packets() {
			if c.ForHost && inCluster(c.Src) {
				t.Errorf("leak: %s %s:%d -> %s:%d from MAC %s at %s", c.Proto, c.Src, c.SrcPort, c.Dst, c.DstPort, c.MAC, c.At.Format("15:04:05.000"))
				break
			}
		}
		t.Fatalf("%d packets reached the web host with a pod source across 20 moves", leaks)
	}
}
