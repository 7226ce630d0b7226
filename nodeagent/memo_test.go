package nodeagent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// A feature that reads only the node's own pods compiles again for a change of one of them (in
// the journal, or overlaid then or the time before), of a pod the journal does not name, or of
// a kind it reads; not for a change of another node's pod.
func TestCompiledMemoOfLocalPods(t *testing.T) {
	pod, qos := &corev1.Pod{}, &ovnv1.EgressQoS{}
	gens := watchers.NewGenerations(pod, qos).Journaled(pod)
	snap := watcherstest.Snapshot()
	snap.Generations = gens
	in := &cluster.Input{Snap: snap, Pods: []dataplane.Pod{{Origin: dataplane.Origin{Kind: cluster.KindPod, Namespace: "a", Name: "local"}}}}
	overlaid := func(key string) *cluster.Input { // the CNI's announced pod, in no journal
		over := *snap
		over.Generations = gens.Adding(pod, 1, key)
		return &cluster.Input{Snap: &over, Pods: in.Pods}
	}
	var m compiledMemo
	compiles := 0
	for _, c := range []struct {
		what   string
		change func() *cluster.Input
		again  bool
	}{
		{"the first", func() *cluster.Input { return in }, true},
		{"nothing changed", func() *cluster.Input { return in }, false},
		{"another node's pod", func() *cluster.Input { gens.Changed(pod, "b/served"); return in }, false},
		{"the node's pod", func() *cluster.Input { gens.Changed(pod, "a/local"); return in }, true},
		{"a pod of unknown key", func() *cluster.Input { gens.Changed(pod, ""); return in }, true},
		{"an EgressQoS", func() *cluster.Input { gens.Changed(qos, "a/default"); return in }, true},
		{"another node's pod overlaid", func() *cluster.Input { return overlaid("b/announced") }, false},
		{"the node's pod overlaid", func() *cluster.Input { return overlaid("a/local") }, true},
		{"the node's pod no longer overlaid", func() *cluster.Input { return in }, true},
		{"nothing changed since", func() *cluster.Input { return in }, false},
	} {
		before := compiles
		if err := m.compileOfLocalPods(c.change(), []any{qos}, func() error { compiles++; return nil }); err != nil {
			t.Fatal(err)
		}
		if again := compiles > before; again != c.again {
			t.Errorf("%s: compiled again %v, want %v", c.what, again, c.again)
		}
	}
}
