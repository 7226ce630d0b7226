package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// BenchmarkPrivilegedEgressIPFailover: a pod on a node that hosts no egress IP streams UDP (one
// datagram every 2 ms) to the web host while the egress node's fabric link goes down; the time
// from the link going down to the web host seeing the egress IP again, from the new egress
// node, over 20 trials (the IP moves back and forth between two egress nodes; the leader is
// on the pod's node). Run with -benchtime 1x.
func BenchmarkPrivilegedEgressIPFailover(b *testing.B) {
	privileged.Require(b)
	benchFailover(b, newEIPLab(b, 3), 20)
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

// BenchmarkPrivilegedEgressIPLeaderFailover: as BenchmarkPrivilegedEgressIPFailover, but the
// egress node is also the leader and loses all its network (fabric link and API server), with
// the leader-election timings given by the --leader-election-* flags: the defaults (Lease 15 s,
// renew deadline 10 s, retry 2 s), then short ones (4 s, 3 s, 500 ms). 3 trials each, each in
// a fresh lab (the old leader, back, disturbs the next trial: see the FINDING it logs).
func BenchmarkPrivilegedEgressIPLeaderFailover(b *testing.B) {
	privileged.Require(b)
	for _, timers := range [][3]string{{"15s", "10s", "2s"}, {"4s", "3s", "500ms"}} {
		b.Run("lease-"+timers[0], func(b *testing.B) {
			for range b.N {
				var ds []time.Duration
				for i := range 3 {
					ds = append(ds, leaderTrial(b, i, timers))
				}
				spread(b, "leader-failover", ds)
			}
		})
	}
}

// leaderTrial runs one leader failover in a lab of its own: nodes 0 and 1 are egress nodes,
// node 0 leads and hosts the IP, node 2 hosts the streaming pod.
func leaderTrial(b *testing.B, i int, timers [3]string) time.Duration {
	args := []string{"--leader-election-lease-duration", timers[0], "--leader-election-renew-deadline", timers[1],
		"--leader-election-retry-period", timers[2]}
	l := lab.New(b, lab.Options{Nodes: 3, Agents: true, AgentArgs: args, NodePrefix: fmt.Sprintf("t%d-", i),
		NodeLabels: map[int]map[string]string{0: {assignable: ""}, 1: {assignable: ""}}})
	defer l.Close() // labs sharing the control plane would assign each other's EgressIPs
	web, err := l.AddExternal("web", lab.ExternalOptions{}, web4.String(), web6.String())
	if err != nil {
		b.Fatal(err)
	}
	ns := l.CP.Namespace(b)
	e := &eipLab{Lab: l, web: web, ns: ns}
	labelNamespace(b, e)
	leader := leaderNode(b, e.Lab)
	if leader != l.Nodes[0] {
		b.Fatalf("the leader is %s, want %s", leader.Name, l.Nodes[0].Name)
	}
	pod := addPod(b, l.Nodes[2], ns, "streamer", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	v4 := netip.MustParseAddr(eip4)
	name := e.egressIP(b, "bench", "eip", v4)
	defer func() { _ = l.Kube.Delete(context.Background(), "k8s.ovn.org/v1", "EgressIP", "", name) }()
	e.waitPlaced(b, name, 20*time.Second, map[*lab.Node]netip.Addr{l.Nodes[0]: v4})
	capture := web.Capture()
	defer capture.Stop()
	s, err := pod.StreamUDP(webAddr(v4), 2*time.Millisecond)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	if _, ok := capture.Await(time.Now(), 10*time.Second, func(c lab.Captured) bool { return c.ForHost && c.Src == v4 }); !ok {
		b.Fatal("the stream does not arrive with the egress IP")
	}
	took, to := failoverTrial(b, l, e.node(e.nodeOf(b, name, v4)), v4, capture, webPort, true)
	b.Logf("trial %d: leader and egress node %s off the network; %s back through %s after %s", i, leader.Name, v4, to.Name, took.Round(time.Millisecond))
	back := time.Now()
	for time.Since(back) < 8*time.Second {
		if h := leaseHolder(context.Background(), l.Client, l.LeaderNamespace()); h == "controller@"+leader.Name {
			b.Logf("trial %d: FINDING: %s took the Lease back from %s %s after it came back", i, leader.Name, to.Name, time.Since(back).Round(time.Millisecond))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return took
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
