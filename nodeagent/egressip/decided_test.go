package egressip

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

var podKind = &corev1.Pod{}

// decidedCluster is three nodes (n1 is this one), namespaces a1 and a2 of team a and b1 of team
// b, and two objects selecting team a's pods: old (app=x, its IP on n1) and new (tier=web, its
// IPs on n1 and n2, created later); a pod both select is old's unless new served it first. Its
// pods are in the returned indexer, which the snapshot lists, with a journal of their changes.
func decidedCluster() (*watchers.Snapshot, cache.Indexer, *watchers.Generations) {
	eip := func(name string, created int, sel map[string]string, items ...ovnv1.EgressIPStatusItem) *ovnv1.EgressIP {
		e := &ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(int64(created), 0))},
			Spec: ovnv1.EgressIPSpec{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
				PodSelector: metav1.LabelSelector{MatchLabels: sel}},
			Status: ovnv1.EgressIPStatus{Items: items}}
		for _, it := range items {
			e.Spec.EgressIPs = append(e.Spec.EgressIPs, ovnv1.IPAddress(it.EgressIP))
		}
		return e
	}
	objs := []runtime.Object{
		eip("old", 1, map[string]string{"app": "x"}, ovnv1.EgressIPStatusItem{Node: "n1", EgressIP: "192.0.2.100"}),
		eip("new", 2, map[string]string{"tier": "web"}, ovnv1.EgressIPStatusItem{Node: "n1", EgressIP: "192.0.2.101"},
			ovnv1.EgressIPStatusItem{Node: "n2", EgressIP: "192.0.2.102"}),
	}
	for i, n := range []string{"n1", "n2", "n3"} {
		node := clusterNode(n, fmt.Sprintf("192.0.2.%d/24", i+1))
		node.Spec.PodCIDRs = []string{fmt.Sprintf("10.244.%d.0/24", i+1)}
		objs = append(objs, node)
	}
	for ns, team := range map[string]string{"a1": "a", "a2": "a", "b1": "b"} {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": team}}})
	}
	snap := watcherstest.Snapshot(objs...)
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		watchers.PodsByNode: watchers.PodIndexers[watchers.PodsByNode]})
	snap.Pods, snap.PodIndex = watchers.NewPodLister(pods), pods
	snap.Generations = watchers.NewGenerations(&ovnv1.EgressIP{}, &corev1.Namespace{}, &corev1.Node{}, podKind).Journaled(podKind)
	return snap, pods, snap.Generations
}

func decidedInput(snap *watchers.Snapshot) *cluster.Input {
	return &cluster.Input{Snap: snap, Node: "n1", Networks: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
}

// normalized is p with empty lists as nil: a patched part and a part compiled whole hold the
// same entries, in the same order, whichever way they were built.
func normalized(p Part) Part {
	if len(p.Guarded) == 0 {
		p.Guarded = nil
	}
	if len(p.SNAT) == 0 {
		p.SNAT = nil
	}
	if len(p.Steer) == 0 {
		p.Steer = nil
	}
	return p
}

// TestCompileDecidesChangedPodsAsAll: through 400 random changes of pods (created, deleted,
// relabelled, moved between the objects' selections, readdressed, completed; local and
// remote), a compiler that decides again for the pods the journal names gives, after each,
// the part a compiler that decides for every pod gives (the first claim of a pod both objects
// select holding in both).
func TestCompileDecidesChangedPodsAsAll(t *testing.T) {
	snap, pods, gens := decidedCluster()
	whole := *snap
	whole.Generations = nil // no journal: every compile decides for every pod
	patched, compiled := &Compiler{}, &Compiler{}
	rng := rand.New(rand.NewPCG(1, 2))
	namespaces, nodes := []string{"a1", "a2", "b1"}, []string{"n1", "n2", "n3"}
	served := 0
	for step := range 400 {
		ns, name := namespaces[rng.IntN(3)], fmt.Sprintf("p%d", rng.IntN(15))
		key := ns + "/" + name
		if rng.IntN(5) == 0 {
			if o, ok, _ := pods.GetByKey(key); ok {
				_ = pods.Delete(o)
			}
		} else {
			node := rng.IntN(3)
			labels := map[string]string{}
			if rng.IntN(2) == 0 {
				labels["app"] = "x"
			}
			if rng.IntN(2) == 0 {
				labels["tier"] = "web"
			}
			p := runningPod(ns, name, nodes[node], labels, fmt.Sprintf("10.244.%d.%d", node+1, 2+rng.IntN(40)))
			if rng.IntN(8) == 0 {
				p.Status.Phase = corev1.PodSucceeded
			}
			_ = pods.Update(watchers.CachedPod(p))
		}
		gens.Changed(podKind, key)
		got, err := patched.Compile(decidedInput(snap))
		if err != nil {
			t.Fatal(err)
		}
		want, err := compiled.Compile(decidedInput(&whole))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(normalized(got), normalized(want)) {
			t.Fatalf("step %d (%s): patched part\n%+v\nwant, as compiled whole,\n%+v", step, key, got, want)
		}
		served = max(served, len(got.SNAT))
	}
	if served < 5 {
		t.Errorf("at most %d pods SNATed at once: the changes did not exercise the compile", served)
	}
}

// TestCompileDecidesOnlyChangedPods: a change the journal does not name stays unseen until a
// change of another kind makes the compile decide for every pod (which shows that it does not
// walk them), and the pods an overlay lists, or listed, are decided for without a journal entry.
func TestCompileDecidesOnlyChangedPods(t *testing.T) {
	snap, pods, gens := decidedCluster()
	c := &Compiler{}
	snat := func(what string, s *watchers.Snapshot, want ...string) {
		t.Helper()
		part, err := c.Compile(decidedInput(s))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range part.SNAT {
			got = append(got, e.Pod.String())
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: SNAT of %v, want %v", what, got, want)
		}
	}
	_ = pods.Add(watchers.CachedPod(runningPod("a1", "p1", "n2", map[string]string{"app": "x"}, "10.244.2.5")))
	gens.Changed(podKind, "a1/p1")
	snat("first", snap, "10.244.2.5")
	_ = pods.Add(watchers.CachedPod(runningPod("a1", "p2", "n2", map[string]string{"app": "x"}, "10.244.2.6")))
	gens.Changed(podKind, "a1/p1") // not p2
	snat("p2 added, the journal naming p1 alone", snap, "10.244.2.5")
	gens.Changed(&corev1.Namespace{}, "")
	snat("after a namespace's change", snap, "10.244.2.5", "10.244.2.6")

	// An announced pod: listed by the overlay (the test's caches hold it), named by no journal.
	_ = pods.Add(watchers.CachedPod(runningPod("a2", "p3", "n3", map[string]string{"app": "x"}, "10.244.3.7")))
	over := *snap
	over.Generations = gens.Adding(podKind, 1, "a2/p3")
	snat("p3 overlaid", &over, "10.244.2.5", "10.244.2.6", "10.244.3.7")
	o, _, _ := pods.GetByKey("a2/p3")
	_ = pods.Delete(o)
	snat("p3 no longer overlaid, nor cached", snap, "10.244.2.5", "10.244.2.6")

	// The same, the pod overlaid at a compile of everything.
	_ = pods.Add(watchers.CachedPod(runningPod("a2", "p4", "n3", map[string]string{"app": "x"}, "10.244.3.8")))
	gens.Changed(&corev1.Namespace{}, "")
	over.Generations = gens.Adding(podKind, 2, "a2/p4")
	snat("p4 overlaid as a namespace changed", &over, "10.244.2.5", "10.244.2.6", "10.244.3.8")
	o, _, _ = pods.GetByKey("a2/p4")
	_ = pods.Delete(o)
	snat("p4 no longer overlaid, nor cached", snap, "10.244.2.5", "10.244.2.6")
}
