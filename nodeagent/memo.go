package nodeagent

import (
	"net/netip"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// What the sync loop keeps from one sync to the next while what it was computed from stays, as
// the generations of the kinds of objects read tell (watchers.Generations): at the scale of
// thousands of nodes and namespaces, a sync for one object's change must not pay again for
// everything else.

// servedMemo keeps the scopes a feature named under the generation of what they were named
// from: an egress node of a cluster with 10,000 namespaces and 100 EgressIPs matches them all
// again only when one of those changed, not at every sync.
type servedMemo struct {
	generation uint64
	valid      bool
	scopes     []watchers.PodScope
}

// compiledMemo says what a feature's part was last compiled from: the generation of the kinds
// of objects it reads, the cluster networks and the node's pods (those the CNI announced
// included). A sync for anything else (an EgressFirewall's edit) keeps the part instead of
// compiling it again: EgressIP's selection of 10,000 served pods by 100 objects costs an
// egress node tens of milliseconds, and each feature reads every Node.
type compiledMemo struct {
	generation uint64
	valid      bool
	networks   []netip.Prefix
	pods       []dataplane.Pod
}

// compile runs compile, which reads in and objects of kinds only, unless what it would compile
// from is what the part it compiled last came from.
func (m *compiledMemo) compile(in *cluster.Input, kinds []any, compile func() error) error {
	// Before the caches are read (watchers.Generations.Of).
	gen, known := in.Snap.Generations.Of(kinds...)
	if known && m.valid && m.generation == gen && slices.Equal(m.networks, in.Networks) && reflect.DeepEqual(m.pods, in.Pods) {
		return nil
	}
	err := compile()
	*m = compiledMemo{generation: gen, valid: known && err == nil, networks: in.Networks, pods: in.Pods}
	return err
}

// vipsMemo keeps the cluster's load balancer VIPs while Services and Nodes stay: telling them
// from node addresses reads every node's.
type vipsMemo struct {
	generation uint64
	valid      bool
	vips       []netip.Prefix
}

func (m *vipsMemo) of(snap *watchers.Snapshot) []netip.Prefix {
	gen, known := snap.Generations.Of(&corev1.Service{}, &corev1.Node{})
	if !known || !m.valid || m.generation != gen {
		*m = vipsMemo{generation: gen, valid: known, vips: cluster.LoadBalancerVIPs(snap)}
	}
	return m.vips
}
