package nodeagent

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// TestEgressIPsPartKeptWhileItsInputsStay: a sync for a change EgressIP does not read (an
// EgressFirewall's) keeps its part; a change of what it reads (a pod, the node's own pods as
// announced, the cluster networks) compiles it again.
func TestEgressIPsPartKeptWhileItsInputsStay(t *testing.T) {
	pod := func(name, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name}, Spec: corev1.PodSpec{NodeName: "m"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}}}}
	}
	snap, update := watcherstest.Updatable(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"team": "a"}}},
		&ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "e"}, Spec: ovnv1.EgressIPSpec{EgressIPs: []ovnv1.IPAddress{"192.0.2.100"},
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
			Status: ovnv1.EgressIPStatus{Items: []ovnv1.EgressIPStatusItem{{Node: "n", EgressIP: "192.0.2.100"}}}},
		pod("p1", "10.244.1.5"))
	gens := watchers.NewGenerations(&ovnv1.EgressIP{}, &corev1.Namespace{}, &corev1.Node{}, &corev1.Pod{}, &ovnv1.EgressFirewall{})
	snap.Generations = gens
	f, p := &egressIPs{}, &parts{}
	in := &cluster.Input{Snap: snap, Node: "n", Networks: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	compiled := func(what string, want int) {
		t.Helper()
		if err := f.compile(in, p); err != nil {
			t.Fatal(err)
		}
		if len(p.egressIP.SNAT) != want {
			t.Errorf("%s: SNAT of %d pods, want %d", what, len(p.egressIP.SNAT), want)
		}
	}
	compiled("first", 1)
	// Not counted: a compile that runs would see it, a kept part does not.
	update(pod("p2", "10.244.1.6"))
	gens.Changed(&ovnv1.EgressFirewall{}, "")
	compiled("after an EgressFirewall's change", 1)
	gens.Changed(&corev1.Pod{}, "")
	compiled("after a pod's change", 2)
	update(pod("p3", "10.244.1.7"))
	in.Pods = []dataplane.Pod{{Origin: dataplane.Origin{Kind: cluster.KindPod, Namespace: "a", Name: "local"}, IPs: []netip.Addr{netip.MustParseAddr("10.244.0.9")}}}
	compiled("after the node's pods changed", 3)
	update(pod("p4", "10.244.1.8"))
	in.Networks = append(in.Networks, netip.MustParsePrefix("10.96.0.0/12"))
	compiled("after the cluster networks changed", 4)
}

// TestQoSPartKeptWhileItsInputsStay: EgressQoS's part is kept through a sync for another
// feature's change and compiled again when an EgressQoS, a pod or a Service's endpoints change.
func TestQoSPartKeptWhileItsInputsStay(t *testing.T) {
	qosOf := func(name string, dscp int) *ovnv1.EgressQoS {
		return &ovnv1.EgressQoS{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "default"},
			Spec: ovnv1.EgressQoSSpec{Egress: []ovnv1.EgressQoSRule{{DSCP: dscp}}}}
	}
	snap, update := watcherstest.Updatable(qosOf("a", 46))
	gens := watchers.NewGenerations(&ovnv1.EgressQoS{}, &corev1.Pod{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}, &ovnv1.EgressFirewall{}).Journaled(&corev1.Pod{})
	snap.Generations = gens
	f, p := &qos{}, &parts{}
	in := &cluster.Input{Snap: snap, Node: "n", Networks: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	compiled := func(what string, want int) {
		t.Helper()
		if err := f.compile(in, p); err != nil {
			t.Fatal(err)
		}
		if len(p.qos.QoS) != want {
			t.Errorf("%s: %d EgressQoS, want %d", what, len(p.qos.QoS), want)
		}
	}
	compiled("first", 1)
	update(qosOf("b", 10)) // not counted: a compile that runs would see it, a kept part does not
	gens.Changed(&ovnv1.EgressFirewall{}, "")
	compiled("after an EgressFirewall's change", 1)
	for i, kind := range []any{&ovnv1.EgressQoS{}, &corev1.Pod{}, &discoveryv1.EndpointSlice{}} {
		update(qosOf(fmt.Sprint("c", i), 10))
		gens.Changed(kind, "")
		compiled(fmt.Sprintf("after a %T's change", kind), 3+i)
	}
}
