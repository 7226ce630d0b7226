package cluster

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/watchers/watcherstest"
)

// The trusted resolvers are the agent's own, the DNS Service's cluster IPs and its endpoints:
// not another Service's, nor a kube-dns of another namespace.
func TestClusterDNS(t *testing.T) {
	svc := func(ns, name, ip string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{ClusterIPs: []string{ip}}}
	}
	slice := func(ns, svc, ip string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}}}}
	}
	snap := watcherstest.Snapshot(
		svc("kube-system", "kube-dns", "10.96.0.10"), slice("kube-system", "kube-dns", "10.244.1.5"),
		svc("team", "kube-dns", "10.96.0.66"), slice("team", "kube-dns", "10.244.2.66"),
		svc("kube-system", "other", "10.96.0.77"), slice("kube-system", "other", "10.244.3.77"))
	got := ClusterDNS(snap, []netip.Addr{netip.MustParseAddr("169.254.20.10")})
	slices.SortFunc(got, netip.Addr.Compare)
	want := []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("169.254.20.10")}
	if !slices.Equal(got, want) {
		t.Errorf("ClusterDNS = %v, want %v", got, want)
	}
}
