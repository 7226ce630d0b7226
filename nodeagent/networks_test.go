package nodeagent

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// Without --cluster-cidr the pod networks come from the Nodes' spec.podCIDRs; a local pod
// address outside them (a CNI with its own IPAM) is counted, so the operator sees the flag is
// needed, and the flag fixes it.
func TestPodAddressesOutsideClusterNetworks(t *testing.T) {
	n1 := node("n1", `{"ipv4":"192.0.2.1/24"}`)
	n1.Spec.PodCIDRs = []string{"10.244.1.0/24"}
	objs := []runtime.Object{n1,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		pod("a", "in", "n1", nil, "10.244.1.5"),
		pod("a", "calico", "n1", nil, "192.168.7.9", "10.244.1.6"),
	}
	for _, tc := range []struct {
		name string
		pods []netip.Prefix
		want float64
	}{
		{"discovered from the node", nil, 1},
		{"--cluster-cidr", []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("192.168.0.0/16")}, 0},
	} {
		l := newLoop(&recordingApplier{}, nil, 0, func(c *Config, d *Deps) {
			c.Node, c.Networks.Pods, d.Snapshot = "n1", tc.pods, watcherstest.Snapshot(objs...)
		})
		l.sync(context.Background())
		if got := testutil.ToFloat64(l.deps.Metrics.OutsideNetworks); got != tc.want {
			t.Errorf("%s: %v pod addresses outside the cluster networks, want %v", tc.name, got, tc.want)
		}
	}
}

// The pod networks discovered from the Nodes are kept between syncs while no Node changes,
// and a Node added later widens them at the next sync.
func TestNodeAddedLaterWidensPodNetworks(t *testing.T) {
	n1 := node("n1", `{"ipv4":"192.0.2.1/24"}`)
	n1.Spec.PodCIDRs = []string{"10.244.1.0/24"}
	snap, update := watcherstest.Updatable(n1)
	snap.Generations = watchers.NewGenerations(&corev1.Node{}, &networkingv1.ServiceCIDR{})
	app := &recordingApplier{}
	l := newLoop(app, nil, 0, func(c *Config, d *Deps) { c.Node, d.Snapshot = "n1", snap })
	networks := func() []netip.Prefix {
		l.sync(context.Background())
		app.mu.Lock()
		defer app.mu.Unlock()
		return app.last.Classifier.ClusterNetworks
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}
	if got := networks(); !slices.Equal(got, want) {
		t.Fatalf("cluster networks %v, want %v", got, want)
	}
	n2 := node("n2", `{"ipv4":"192.0.2.2/24"}`)
	n2.Spec.PodCIDRs = []string{"10.244.2.0/24"}
	update(n2)
	snap.Generations.Changed(&corev1.Node{}, "")
	want = append(want, netip.MustParsePrefix("10.244.2.0/24"))
	if got := networks(); !slices.Equal(got, want) {
		t.Errorf("after node n2 (10.244.2.0/24) was added: cluster networks %v, want %v", got, want)
	}
}
