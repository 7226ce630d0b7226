package egressip

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// TestCompileMatchesNamespacesAgainOnlyWhenTheyOrTheObjectsChange: the namespaces an EgressIP
// selects are kept while EgressIPs and Namespaces stay (a pod's change reads the pods of the
// same namespaces), and matched again when a namespace changed.
func TestCompileMatchesNamespacesAgainOnlyWhenTheyOrTheObjectsChange(t *testing.T) {
	eip := &ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "eip"}, Spec: ovnv1.EgressIPSpec{
		EgressIPs:         []ovnv1.IPAddress{"192.0.2.100"},
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
	}, Status: ovnv1.EgressIPStatus{Items: []ovnv1.EgressIPStatusItem{{Node: "n2", EgressIP: "192.0.2.100"}}}}
	snap, update := watcherstest.Updatable(eip, clusterNode("n1", "192.0.2.1/24"), clusterNode("n2", "192.0.2.2/24"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a1", Labels: map[string]string{"team": "a"}}},
		runningPod("a1", "p1", "n1", nil, "10.244.1.5"))
	gens := watchers.NewGenerations(&ovnv1.EgressIP{}, &corev1.Namespace{}, &corev1.Node{}, &corev1.Pod{})
	snap.Generations = gens
	c := &Compiler{}
	snat := func(what string, want int) {
		t.Helper()
		part, err := c.Compile(&cluster.Input{Snap: snap, Node: "n2", Networks: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}})
		if err != nil {
			t.Fatal(err)
		}
		if len(part.SNAT) != want {
			t.Errorf("%s: SNAT %+v, want %d pods", what, part.SNAT, want)
		}
	}
	snat("first", 1)
	update(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a2", Labels: map[string]string{"team": "a"}}})
	update(runningPod("a1", "p2", "n1", nil, "10.244.1.6"))
	update(runningPod("a2", "p3", "n1", nil, "10.244.1.7"))
	gens.Changed(&corev1.Pod{}, "")
	snat("after pods changed (a2's namespace not counted yet)", 2)
	gens.Changed(&corev1.Namespace{}, "")
	snat("after a namespace's change", 3)
}

// TestCompileReadsNodesAgainOnlyWhenTheyOrTheNetworksChange: what the compile reads of every
// Node (exempt addresses, other nodes' pod networks) is kept while Nodes and the cluster
// networks stay, and read again when either changes.
func TestCompileReadsNodesAgainOnlyWhenTheyOrTheNetworksChange(t *testing.T) {
	n3 := clusterNode("n3", "192.0.2.3/24")
	n3.Spec.PodCIDRs = []string{"10.244.3.0/24"}
	snap, update := watcherstest.Updatable(clusterNode("n1", "192.0.2.1/24"), clusterNode("n2", "192.0.2.2/24"))
	gens := watchers.NewGenerations(&ovnv1.EgressIP{}, &corev1.Namespace{}, &corev1.Node{}, &corev1.Pod{})
	snap.Generations = gens
	c := &Compiler{}
	networks := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	compile := func() Part {
		t.Helper()
		part, err := c.Compile(&cluster.Input{Snap: snap, Node: "n2", Networks: networks})
		if err != nil {
			t.Fatal(err)
		}
		return part
	}
	exempts := func(p Part, s string) bool {
		return slices.Contains(p.Exempt, netip.MustParsePrefix(s))
	}
	if p := compile(); !exempts(p, "192.0.2.1/32") || exempts(p, "192.0.2.3/32") {
		t.Fatalf("first: exempt %v", p.Exempt)
	}
	update(n3)
	if p := compile(); exempts(p, "192.0.2.3/32") {
		t.Errorf("a node added but not counted yet: it is read already (nothing kept)")
	}
	gens.Changed(&corev1.Node{}, "")
	if p := compile(); !exempts(p, "192.0.2.3/32") || !slices.Contains(p.RemotePods, netip.MustParsePrefix("10.244.3.0/24")) {
		t.Errorf("after a node's change: exempt %v, remote pods %v, want n3's address and pod network", p.Exempt, p.RemotePods)
	}
	networks = append(networks, netip.MustParsePrefix("10.96.0.0/16"))
	if p := compile(); !exempts(p, "10.96.0.0/16") {
		t.Errorf("after the cluster networks changed: exempt %v, want 10.96.0.0/16", p.Exempt)
	}
}
