package nodeagent

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// What the sync loop keeps from one sync to the next while what it was computed from stays, as
// the generations of the kinds of objects read tell (watchers.Generations): at the scale of
// thousands of nodes and namespaces, a sync for one object's change must not pay again for
// everything else.

// compiledMemo says what a feature's part was last compiled from: the generation of the kinds
// of objects it reads, the cluster networks and the node's pods (those the CNI announced
// included). A sync for anything else (an EgressFirewall's edit) keeps the part instead of
// compiling it again: EgressIP's selection of 10,000 served pods by 100 objects costs an
// egress node tens of milliseconds, and each feature reads every Node.
type compiledMemo struct {
	kept     watchers.Memo[struct{}]
	networks []netip.Prefix
	pods     []dataplane.Pod
	changed  watchers.Follower // the pods changed since the last compileOfLocalPods
}

// compile runs compile, which reads in and objects of kinds only, unless what it would compile
// from is what the part it compiled last came from.
func (m *compiledMemo) compile(in *cluster.Input, kinds []any, compile func() error) error {
	if !slices.Equal(m.networks, in.Networks) || !slices.EqualFunc(m.pods, in.Pods, dataplane.Pod.Equal) {
		m.kept.Forget()
		m.networks, m.pods = in.Networks, in.Pods
	}
	_, err := m.kept.Get(in.Snap.Generations, kinds, func() (struct{}, error) { return struct{}{}, compile() })
	return err
}

// compileOfLocalPods is compile for a feature that reads of the pods only the node's own
// (in.Pods, and their objects): while the pods' journal names the pods that changed, a change
// of none of the node's pods keeps the part. An egress node reads the 10,000 pods its
// EgressIPs serve; their changes are none of its EgressQoS's.
func (m *compiledMemo) compileOfLocalPods(in *cluster.Input, kinds []any, compile func() error) error {
	if keys, ok := m.changed.Changed(in.Snap.Generations, &corev1.Pod{}); !ok || anyLocal(keys, in.Pods) {
		m.kept.Forget()
	}
	return m.compile(in, kinds, compile)
}

// anyLocal says whether one of the pod keys is one of pods.
func anyLocal(keys []string, pods []dataplane.Pod) bool {
	if len(keys) == 0 {
		return false
	}
	local := make(map[string]bool, len(pods))
	for _, p := range pods {
		if p.Origin.Kind == cluster.KindPod {
			local[p.Origin.Namespace+"/"+p.Origin.Name] = true
		}
	}
	return slices.ContainsFunc(keys, func(k string) bool { return local[k] })
}

// networkReads are the kinds of objects the cluster networks are told from: every Node's pod
// CIDRs (aggregated, 5,000 of them in a large cluster) and the ServiceCIDRs.
var networkReads = []any{&corev1.Node{}, &networkingv1.ServiceCIDR{}}

// clusterNetworks are the cluster networks, kept while Nodes and ServiceCIDRs stay.
func (l *SyncLoop) clusterNetworks() []netip.Prefix {
	networks, _ := l.networks.Get(l.deps.Snapshot.Generations, networkReads, func() ([]netip.Prefix, error) {
		return cluster.Networks(l.deps.Snapshot, l.cfg.Networks), nil
	})
	return networks
}

// vipReads are the kinds of objects the cluster's load balancer VIPs are told from (telling
// them from node addresses reads every node's).
var vipReads = []any{&corev1.Service{}, &corev1.Node{}}

// loadBalancerVIPs are the cluster's load balancer VIPs, kept while Services and Nodes stay.
func (l *SyncLoop) loadBalancerVIPs() []netip.Prefix {
	vips, _ := l.vips.Get(l.deps.Snapshot.Generations, vipReads, func() ([]netip.Prefix, error) {
		return cluster.LoadBalancerVIPs(l.deps.Snapshot), nil
	})
	return vips
}
