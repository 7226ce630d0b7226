package status

import (
	"fmt"
	"runtime"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// BenchmarkFirewallCacheMemory is the live heap an agent's cache holds per EgressFirewall of 10
// rules in a cluster of 5,000 nodes, each of which wrote its entry: the whole status (every
// agent's entry, as upstream's nodes cache it), or the agent's own entry (OwnEntries).
//
//	go test ./nodeagent/status -run '^$' -bench FirewallCacheMemory
func BenchmarkFirewallCacheMemory(b *testing.B) {
	const firewalls, nodes = 200, 5000
	for _, bc := range []struct {
		name string
		trim func(any)
	}{{"whole", func(any) {}}, {"own", OwnEntries("kwok-node-0042")}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				for i := range firewalls {
					ef := harnessFirewall(i, nodes) // as decoded: a fresh object each
					bc.trim(ef)
					if err := store.Add(ef); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/firewalls, "live-B/firewall")
				runtime.KeepAlive(store)
			}
		})
	}
}

// harnessFirewall is namespace i's EgressFirewall of the scale harness with the entries of nodes
// nodes.
func harnessFirewall(i, nodes int) *ovnv1.EgressFirewall {
	ef := &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("scale-%05d", i), Name: "default",
		UID: "00000000-0000-4000-8000-000000000000", ResourceVersion: "1000000", Generation: 1, CreationTimestamp: metav1.Now()}}
	for k := range 10 {
		ef.Spec.Egress = append(ef.Spec.Egress, ovnv1.EgressFirewallRule{Type: ovnv1.EgressFirewallRuleAllow,
			To:    ovnv1.EgressFirewallDestination{CIDRSelector: fmt.Sprintf("198.18.%d.0/24", k)},
			Ports: []ovnv1.EgressFirewallPort{{Protocol: "TCP", Port: 443}}})
	}
	ef.Status.Status = fwApplied
	for n := range nodes {
		ef.Status.Messages = append(ef.Status.Messages, fmt.Sprintf("kwok-node-%04d: %s", n, fwApplied))
	}
	return ef
}
