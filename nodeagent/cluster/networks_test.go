package cluster

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/egressd/egressd/watchers"
)

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, x := range s {
		out[i] = netip.MustParsePrefix(x)
	}
	return out
}

func snapshot(nodes []*corev1.Node, cidrs ...*networkingv1.ServiceCIDR) *watchers.Snapshot {
	ni := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		_ = ni.Add(n)
	}
	si := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, c := range cidrs {
		_ = si.Add(c)
	}
	return &watchers.Snapshot{Nodes: corelisters.NewNodeLister(ni), ServiceCIDRs: networkinglisters.NewServiceCIDRLister(si)}
}

func podNode(name string, cidrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDRs: cidrs}}
	if len(cidrs) > 0 {
		n.Spec.PodCIDR = cidrs[0]
	}
	return n
}

func serviceCIDR(name string, cidrs ...string) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
}

// Without flags, the networks are discovered: the nodes' pod CIDRs (aggregated: sibling /24s
// become one prefix) and the ServiceCIDR objects; flags replace the pod networks and add
// service networks.
func TestNetworks(t *testing.T) {
	nodes := []*corev1.Node{
		podNode("a", "10.244.0.0/24", "fd00:10:244::/64"),
		podNode("b", "10.244.1.0/24", "fd00:10:244:1::/64"),
		podNode("c", "10.244.3.0/24"),
		{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}, Spec: corev1.NodeSpec{PodCIDR: "10.244.4.0/24"}}, // only the old field
		podNode("none"),
	}
	services := []*networkingv1.ServiceCIDR{serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/112"), serviceCIDR("extra", "10.100.0.0/16")}
	for _, tc := range []struct {
		name  string
		flags NetworkFlags
		want  []netip.Prefix
	}{{
		name: "discovered",
		want: prefixes("10.96.0.0/16", "10.100.0.0/16", "10.244.0.0/23", "10.244.3.0/24", "10.244.4.0/24", "fd00:10:96::/112", "fd00:10:244::/63"),
	}, {
		name:  "pod networks of the flag replace the nodes'; service networks of the flag add to the objects'",
		flags: NetworkFlags{Pods: prefixes("192.168.0.0/16"), Services: prefixes("10.97.0.0/16", "10.96.0.0/16")},
		want:  prefixes("10.96.0.0/15", "10.100.0.0/16", "192.168.0.0/16", "fd00:10:96::/112"),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.flags.Pods)
			got := Networks(snapshot(nodes, services...), tc.flags)
			if !slices.Equal(got, tc.want) {
				t.Errorf("networks\n got %v\nwant %v", got, tc.want)
			}
			if !slices.Equal(before, tc.flags.Pods) {
				t.Errorf("the flags' list was modified: %v", tc.flags.Pods)
			}
		})
	}
}
