package cluster

import (
	"net/netip"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/egressd/egressd/watchers"
)

// A ServiceCIDR the cluster adds is a cluster network like the flags' ones.
func TestNetworksIncludeServiceCIDRs(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = idx.Add(&networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16", "fd00:10:96::/112"}}})
	_ = idx.Add(&networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "extra"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.100.0.0/16"}}})
	flags := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/16")}
	got := Networks(&watchers.Snapshot{ServiceCIDRs: networkinglisters.NewServiceCIDRLister(idx)}, flags)
	want := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/16"),
		netip.MustParsePrefix("fd00:10:96::/112"), netip.MustParsePrefix("10.100.0.0/16")}
	slices.SortFunc(got, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	slices.SortFunc(want, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	if !slices.Equal(got, want) {
		t.Errorf("networks %v, want %v", got, want)
	}
	if len(flags) != 2 {
		t.Errorf("the flags' list was modified: %v", flags)
	}
}
