package nft

import (
	"net/netip"
	"runtime"
	"testing"

	"github.com/egressd/egressd/dataplane"
)

// BenchmarkPlan: what the egress node of make bench-scale's full size plans per Apply before
// the kernel is touched: 100 EgressIPs serving 10,000 pods of other nodes, 5,000 nodes (their
// addresses exempt, their pod networks remote, their replies routed by a mark), 30 local pods
// under a firewall. The chains the verdict maps' entries jump to are found as Apply finds them.
func BenchmarkPlan(b *testing.B) {
	s := egressNodeState()
	t := &Table{}
	for b.Loop() {
		want, _, _, _ := t.plan(s)
		dynamicChains(want)
	}
}

// BenchmarkPlanMemory reports the live heap of an egress node's plan as a Table keeps it (its
// EgressIP and reply parts, kept while their inputs stay), per pod it SNATs.
func BenchmarkPlanMemory(b *testing.B) {
	s := egressNodeState()
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		t := &Table{}
		want, _, _, _ := t.plan(s)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(len(s.SNAT)), "live-B/pod")
		runtime.KeepAlive(want)
		runtime.KeepAlive(t)
	}
}

// egressNodeState is an egress node's state at the scale harness's size: 10,000 pods SNATed,
// guarded and replied to, 5,000 nodes' addresses exempt and their pod networks remote.
func egressNodeState() *dataplane.NftablesState {
	s := &dataplane.NftablesState{SteerMask: 0x00ff0000}
	for i := range 10000 {
		pod := netip.AddrFrom4([4]byte{10, byte(100 + i/65536), byte(i / 256), byte(i)})
		eip := netip.AddrFrom4([4]byte{172, 18, 0, byte(100 + i%100)})
		s.SNAT = append(s.SNAT, dataplane.SNAT{Origin: dataplane.Origin{Kind: "EgressIP", Name: eip.String()}, Pod: pod, To: eip})
		s.Guarded = append(s.Guarded, pod)
		s.Replies = append(s.Replies, dataplane.SteeredPod{Pod: pod, Mark: 0x00010000})
	}
	for i := range 5000 {
		s.Exempt = append(s.Exempt, netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 20, byte(i / 250), byte(i%250 + 1)}), 32))
		s.RemotePods = append(s.RemotePods, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i / 256), byte(i), 0}), 24))
	}
	for i := range 30 {
		s.FirewalledPods = append(s.FirewalledPods, netip.AddrFrom4([4]byte{10, 244, 0, byte(i + 2)}))
	}
	return s
}
