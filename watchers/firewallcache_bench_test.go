package watchers

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// BenchmarkTransformFirewallMemory reports the live heap one EgressFirewall costs in the agent's
// cache, as the scale harness's arrive (10 rules: CIDRs, two dnsNames, a nodeSelector), decoded
// from JSON and trimmed by transform. Every agent caches every EgressFirewall of the cluster.
func BenchmarkTransformFirewallMemory(b *testing.B) {
	const firewalls = 10000
	for b.Loop() {
		store := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range firewalls {
			if err := store.Add(decodedFirewall(b, i)); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/firewalls, "live-B/firewall")
		runtime.KeepAlive(store)
	}
}

// decodedFirewall is scaleFirewall(i) as an informer caches it: decoded from JSON, transformed.
func decodedFirewall(tb testing.TB, i int) *ovnv1.EgressFirewall {
	data, err := json.Marshal(scaleFirewall(i))
	if err != nil {
		tb.Fatal(err)
	}
	ef := &ovnv1.EgressFirewall{}
	if err := json.Unmarshal(data, ef); err != nil {
		tb.Fatal(err)
	}
	out, _ := transform(ef)
	return out.(*ovnv1.EgressFirewall)
}

// scaleFirewall is namespace i's EgressFirewall in the scale harness (test/scale), with its
// status entries of two nodes.
func scaleFirewall(i int) *ovnv1.EgressFirewall {
	tcp := func(p int32) []ovnv1.EgressFirewallPort {
		return []ovnv1.EgressFirewallPort{{Protocol: "TCP", Port: p}}
	}
	to := func(cidr string) ovnv1.EgressFirewallDestination {
		return ovnv1.EgressFirewallDestination{CIDRSelector: cidr}
	}
	allow, deny := ovnv1.EgressFirewallRuleAllow, ovnv1.EgressFirewallRuleDeny
	return &ovnv1.EgressFirewall{
		ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: fmt.Sprintf("scale-%05d", i), UID: "0c1e5d8e-3f7a-4e55-9d1b-5b2f1f0a9c3e",
			ResourceVersion: fmt.Sprint(2_000_000 + i), CreationTimestamp: metav1.Now(), Generation: 1,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "scale", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Spec: ovnv1.EgressFirewallSpec{Egress: []ovnv1.EgressFirewallRule{
			{Type: allow, To: to(fmt.Sprintf("203.0.113.%d/32", i%250)), Ports: tcp(443)},
			{Type: allow, To: ovnv1.EgressFirewallDestination{DNSName: fmt.Sprintf("svc-%03d.scale.example", i%200)}},
			{Type: allow, To: ovnv1.EgressFirewallDestination{DNSName: fmt.Sprintf("svc-%03d.scale.example", (i+7)%200)}, Ports: tcp(443)},
			{Type: allow, To: ovnv1.EgressFirewallDestination{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"scale.egressd.io/infra": "true"}}}},
			{Type: allow, To: to(fmt.Sprintf("198.18.%d.0/24", i%256))},
			{Type: allow, To: to(fmt.Sprintf("100.64.%d.0/22", i%64*4)), Ports: tcp(5432)},
			{Type: deny, To: to("169.254.169.254/32")},
			{Type: allow, To: to(fmt.Sprintf("2001:db8:%x::/48", i%65536))},
			{Type: deny, To: to("::/0")},
			{Type: deny, To: to("0.0.0.0/0")},
		}},
		Status: ovnv1.EgressFirewallStatus{Status: "EgressFirewall Rules applied",
			Messages: []string{"scale-node-0: EgressFirewall Rules applied", "scale-node-1: EgressFirewall Rules applied"}},
	}
}
