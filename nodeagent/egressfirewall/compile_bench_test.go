package egressfirewall

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// BenchmarkCompileUnchanged: a sync at the scale harness's size (issue #35: 10,000 namespaces,
// each firewall of 10 rules, two with dnsName and one nodeSelector; 5,000 nodes; pods of 30
// namespaces on the node) when nothing the firewalls read changed, as after a pod's change:
// what every sync of an agent pays.
func BenchmarkCompileUnchanged(b *testing.B) {
	var objs []runtime.Object
	for i := range 5000 {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i), Labels: map[string]string{"zone": fmt.Sprint(i % 3)}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.%d.%d.1", i/250, i%250)}}}})
	}
	for i := range 10000 {
		var rules []ovnv1.EgressFirewallRule
		for j := range 7 {
			rules = append(rules, cidrRule("Allow", fmt.Sprintf("172.%d.%d.0/24", 16+j, i%250)))
		}
		rules = append(rules,
			ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{DNSName: fmt.Sprintf("api%d.example.com", i%50)}},
			ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{DNSName: "*.cdn.example.com"}},
			ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "1"}}}})
		e := ef(fmt.Sprintf("ns-%05d", i), rules...)
		e.UID, e.Generation = types.UID(fmt.Sprint("uid-", i)), 1
		objs = append(objs, e)
	}
	snap := watcherstest.Snapshot(objs...)
	snap.Generations = watchers.NewGenerations(&ovnv1.EgressFirewall{}, &corev1.Node{}, &corev1.Namespace{})
	answer := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")}
	in := &cluster.Input{Snap: snap, Lookup: func(string) []netip.Addr { return answer }}
	for i := range 30 {
		in.Pods = append(in.Pods, dataplane.Pod{Origin: dataplane.Origin{Kind: "Pod", Namespace: fmt.Sprintf("ns-%05d", i), Name: "p"}})
	}
	c := &Compiler{}
	if _, err := c.Compile(in); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Compile(in); err != nil {
			b.Fatal(err)
		}
	}
}
