package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// BenchmarkPrivilegedEgressIPFailover: a pod on a node that hosts no egress IP streams UDP (one
// datagram every 2 ms) to the web host while the egress node's fabric link goes down; the time
// from the link going down to the web host seeing the egress IP again, from the new egress
// node, over 20 trials (the IP moves back and forth between two egress nodes; the leader is
// on the pod's node), on the lab's CNI of $EGRESSD_BENCH_CNI (benchCNI). Run with
// -benchtime 1x.
func BenchmarkPrivilegedEgressIPFailover(b *testing.B) {
	privileged.Require(b)
	benchFailover(b, newEIPLabOn(b, 3, benchCNI(b, 3)), 20)
}

// benchCNI is the CNI of every node of a benchmark's lab of n nodes, from $EGRESSD_BENCH_CNI
// (make bench-compat): routed (the default), bridged, flannel or cilium.
func benchCNI(b *testing.B, n int) map[int]lab.CNI {
	c := lab.CNI(os.Getenv("EGRESSD_BENCH_CNI"))
	switch c {
	case "", lab.Routed:
		return nil
	case lab.Bridged, lab.Flannel, lab.Cilium:
	default:
		b.Fatalf("EGRESSD_BENCH_CNI=%q: routed, bridged, flannel or cilium", c)
	}
	b.Logf("CNI: %s", c)
	out := map[int]lab.CNI{}
	for i := range n {
		out[i] = c
	}
	return out
}

// benchFailover runs trials failovers of an egress IP between nodes 1 and 2 of e, the leader
// and the streaming pod on node 0.
func benchFailover(b *testing.B, e *eipLab, trials int) {
	pod := addPod(b, e.Nodes[0], e.ns, "streamer", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	v4 := netip.MustParseAddr(eip4)
	name := e.egressIP(b, "bench", "eip", v4)
	e.waitPlaced(b, name, 20*time.Second, map[*lab.Node]netip.Addr{e.Nodes[1]: v4})
	failovers(b, e, pod, v4, trials, func() *lab.Node { return e.node(e.nodeOf(b, name, v4)) })
}

// shippedTimers are egressd controller's default leader-election timers, which the lab's
// controllers otherwise lengthen for a loaded machine.
var shippedTimers = []string{"--leader-election-lease-duration=1s", "--leader-election-renew-deadline=600ms",
	"--leader-election-retry-period=150ms"}

// BenchmarkPrivilegedEgressIPLeaderFailover: the egress node is also the node of the leading
// controller replica (a small cluster's case), and it loses all its network (fabric link and
// API server) while a pod on node 2 streams UDP; the time until the web host sees the egress
// IP again from the other egress node, whose standby replica took over, with the shipped
// timers, over 20 trials. The IP and the Lease both move at each trial, so each trial cuts the
// leader's node, unless the Lease went back meanwhile (a leader slower to renew than its
// deadline on a loaded machine): such trials cut the egress node alone and are reported apart.
// Run with -benchtime 1x.
func BenchmarkPrivilegedEgressIPLeaderFailover(b *testing.B) {
	privileged.Require(b)
	e := newLeaderLab(b)
	for range b.N {
		var both, alone []time.Duration
		for i := range 20 {
			if took, withLeader := e.leaderTrial(b, i); withLeader {
				both = append(both, took)
			} else {
				alone = append(alone, took)
			}
		}
		spread(b, "leader-failover", both)
		if len(alone) > 0 {
			spread(b, "egress-node-only", alone)
		}
	}
}

// TestPrivilegedEgressIPLeaderFailover: twice, the node that hosts the egress IP (and, the
// first time at least, runs the leading controller replica) loses its network; the IP is back
// from the other egress node within 3 s (target: 2 s, measured by the benchmark). A move back
// once the node returned is logged as a finding (see leaderTrial).
func TestPrivilegedEgressIPLeaderFailover(t *testing.T) {
	privileged.Require(t)
	e := newLeaderLab(t)
	for i := range 2 {
		if took, withLeader := e.leaderTrial(t, i); took > 3*time.Second {
			t.Errorf("trial %d: %s to fail over (the leader's node too: %t)", i, took.Round(time.Millisecond), withLeader)
		} else if i == 0 && !withLeader {
			t.Errorf("trial 0: the leader was not on the egress node")
		}
	}
}

// leaderLab: nodes 0 and 1 are egress nodes and each runs a controller replica (shipped timers),
// node 2 runs a pod that streams to the web host with the egress IP.
type leaderLab struct {
	*eipLab
	name    string
	ip      netip.Addr
	capture *lab.Capture
}

func newLeaderLab(t testing.TB) *leaderLab {
	l := lab.New(t, lab.Options{Nodes: 3, Agents: true, ControllerNodes: []int{0, 1}, ControllerArgs: shippedTimers,
		NodeLabels: map[int]map[string]string{0: {assignable: ""}, 1: {assignable: ""}}})
	web, err := l.AddExternal("web", lab.ExternalOptions{}, web4.String(), web6.String())
	if err != nil {
		t.Fatal(err)
	}
	e := &leaderLab{eipLab: &eipLab{Lab: l, web: web, ns: l.CP.Namespace(t)}, ip: netip.MustParseAddr(eip4)}
	labelNamespace(t, e.eipLab)
	pod := addPod(t, l.Nodes[2], e.ns, "streamer", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	e.name = e.egressIP(t, "bench", "eip", e.ip)
	poll.Eventually(t, "the egress IP placed", 20*time.Second, func() error {
		if e.nodeOf(t, e.name, e.ip) == "" {
			return fmt.Errorf("not placed")
		}
		return nil
	})
	e.capture = web.Capture()
	t.Cleanup(e.capture.Stop)
	s, err := pod.StreamUDP(webAddr(e.ip), 2*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	if _, ok := e.capture.Await(time.Now(), 10*time.Second, func(c lab.Captured) bool { return c.ForHost && c.Src == e.ip }); !ok {
		t.Fatal("the stream does not arrive with the egress IP")
	}
	return e
}

// leaderTrial cuts off the node that hosts the IP and returns the time until the IP is back
// from the other node, and whether the leading replica was on the cut node. Once the node is
// back, the IP must stay where it went for 2 s, and the new leader judge the node reachable
// again before the next trial.
func (e *leaderLab) leaderTrial(t testing.TB, i int) (time.Duration, bool) {
	t.Helper()
	var host *lab.Node
	poll.Eventually(t, fmt.Sprintf("trial %d: the egress IP placed", i), 10*time.Second, func() error {
		if host = e.node(e.nodeOf(t, e.name, e.ip)); host == nil {
			return fmt.Errorf("not placed (or the status not read)")
		}
		return nil
	})
	withLeader := leaderNode(t, e.Lab) == host
	took, to := failoverTrial(t, e.Lab, host, e.ip, e.capture, webPort, true)
	t.Logf("trial %d: egress node %s off the network (the leader's: %t); %s back through %s after %s", i, host.Name, withLeader, e.ip, to.Name, took.Round(time.Millisecond))
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		// "": the status not read this time (a loaded API server), not a move.
		if n := e.nodeOf(t, e.name, e.ip); n != "" && n != to.Name {
			// Open: seen once in CI under the race detector (the new leader moved the IP back
			// 0.6 s after the old node returned; cause not found). Reported, not failed, until
			// understood: the failover itself is what this trial measures.
			var verdicts []string
			if ln := e.LeaderNode(context.Background()); ln != nil {
				for _, nd := range e.Nodes {
					v, _ := ln.Controller.Sample(`egressd_reachability_node_reachable{node="` + nd.Name + `"}`)
					verdicts = append(verdicts, nd.Name+"="+v)
				}
				verdicts = append(verdicts, "leader "+ln.Name)
			}
			t.Logf("trial %d: FINDING: the IP moved back to %q after %s came back (the leader's verdicts: %v)", i, n, host.Name, verdicts)
			break
		}
	}
	poll.Eventually(t, fmt.Sprintf("trial %d: the egress IP placed", i), 10*time.Second, func() error {
		if e.nodeOf(t, e.name, e.ip) == "" {
			return fmt.Errorf("not placed")
		}
		return nil
	})
	reachable(t, leaderNode(t, e.Lab), host, true)
	return took, withLeader
}

func labelNamespace(t testing.TB, e *eipLab) {
	t.Helper()
	labelEgress(t, e.Client, e.ns)
}

// BenchmarkPrivilegedEgressIPProgramming: a new selected pod starts streaming UDP to the web
// host the moment its Pod object is Ready (as the lab's kubelet writes it); the time until the
// web host sees its traffic with the egress IP, for pods on a node that steers them and on the
// egress node itself, 10 pods each.
func BenchmarkPrivilegedEgressIPProgramming(b *testing.B) {
	privileged.Require(b)
	e := newEIPLab(b, 2)
	n0, n1 := e.Nodes[0], e.Nodes[1]
	v4 := netip.MustParseAddr(eip4)
	name := e.egressIP(b, "bench", "eip", v4)
	e.waitPlaced(b, name, 20*time.Second, map[*lab.Node]netip.Addr{n1: v4})
	capture := e.web.Capture()
	defer capture.Stop()
	b.ResetTimer()
	for range b.N {
		for _, n := range []*lab.Node{n0, n1} {
			var ds []time.Duration
			for i := range 10 {
				p := addPod(b, n, e.ns, fmt.Sprintf("new-%s-%d", n.Name, i), lab.PodOptions{Labels: map[string]string{"app": "eip"}})
				ready := time.Now()
				s, err := p.StreamUDP(webAddr(v4), 2*time.Millisecond)
				if err != nil {
					b.Fatal(err)
				}
				port := s.LocalPort()
				got, ok := capture.Await(ready, 10*time.Second, func(c lab.Captured) bool {
					return c.ForHost && c.Proto == "udp" && c.Src == v4 && c.SrcPort == port
				})
				sent, _ := s.Stop()
				if !ok {
					b.Fatalf("pod %d on %s: its stream never arrived with %s", i, n.Name, v4)
				}
				other := capture.Count(func(c lab.Captured) bool {
					return c.ForHost && c.Proto == "udp" && c.SrcPort == port && c.Src != v4 && !c.At.Before(ready)
				})
				ds = append(ds, got.At.Sub(ready))
				b.Logf("pod %d on %s: egress IP seen %s after Ready (%d datagrams sent, %d arrived with another source before)",
					i, n.Name, got.At.Sub(ready).Round(time.Millisecond), sent, other)
			}
			role := "steered"
			if n == n1 {
				role = "on-egress-node"
			}
			spread(b, "programming-"+role, ds)
		}
	}
}
