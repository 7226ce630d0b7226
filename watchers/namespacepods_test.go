package watchers

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// TestNamespacePodsKeepsOnlyItsScopes: the cluster-wide watch's store keeps the pods of its
// namespaces that their selectors select, trimmed, from a plain list, a watch-list (through
// its transformer, every other pod replaced by one shared object) and watch events, signals
// each change it keeps and none it drops, and lets go of a pod relabelled out of its scope.
func TestNamespacePodsKeepsOnlyItsScopes(t *testing.T) {
	signals := 0
	s, err := newNamespacePods([]PodScope{{Namespace: "a"}, {Namespace: "b", Selector: "app=web"}},
		cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { signals++ },
			UpdateFunc: func(any, any) { signals++ },
			DeleteFunc: func(any) { signals++ },
		})
	if err != nil {
		t.Fatal(err)
	}
	web := map[string]string{"app": "web"}
	pods := func() []*corev1.Pod {
		return []*corev1.Pod{
			apiPod("a", "p1", "n2", "10.0.0.1", nil),
			apiPod("b", "web", "n2", "10.0.0.2", web),
			apiPod("b", "db", "n2", "10.0.0.3", map[string]string{"app": "db"}),
			apiPod("c", "web", "n3", "10.0.0.4", web),
		}
	}
	cached := func() []string {
		var out []string
		for _, o := range s.List() {
			p, ok := o.(*Pod)
			if !ok {
				t.Fatalf("%T cached untrimmed", o)
			}
			out = append(out, p.Namespace+"/"+p.Name)
		}
		slices.Sort(out)
		return out
	}
	want := []string{"a/p1", "b/web"}

	var list []any
	for _, p := range pods() {
		list = append(list, p)
	}
	if err := s.Replace(list, "1"); err != nil {
		t.Fatal(err)
	}
	if got := cached(); !slices.Equal(got, want) || !s.synced.Load() || signals != 1 {
		t.Errorf("after a list: %v (synced %v, %d signals), want %v, synced, 1", got, s.synced.Load(), signals, want)
	}

	// A watch-list streams through the transformer into a store keyed as the reflector's.
	tmp := cache.NewStore(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.WithTransformer(s.Transformer()))
	for _, p := range pods() {
		_ = tmp.Add(p)
	}
	n := 0
	for _, o := range tmp.List() {
		if o == dropped {
			n++
		}
	}
	if n != 2 {
		t.Errorf("the watch-list's store holds %d of the 2 dropped pods as the shared object", n)
	}
	if err := s.Replace(tmp.List(), "2"); err != nil {
		t.Fatal(err)
	}
	if got := cached(); !slices.Equal(got, want) {
		t.Errorf("after a watch-list: %v, want %v", got, want)
	}

	signals = 0
	_ = s.Add(apiPod("c", "other", "n3", "10.0.0.5", web))
	_ = s.Update(apiPod("b", "db", "n2", "10.0.0.6", map[string]string{"app": "db"}))
	_ = s.Delete(apiPod("c", "web", "n3", "10.0.0.4", web))
	if signals != 0 {
		t.Errorf("%d signals for pods outside the scopes, want none", signals)
	}
	_ = s.Add(apiPod("a", "p2", "n2", "10.0.0.7", nil))
	_ = s.Update(apiPod("b", "web", "n2", "10.0.0.8", web))
	_ = s.Delete(apiPod("a", "p1", "n2", "10.0.0.1", nil))
	if got, want := cached(), []string{"a/p2", "b/web"}; !slices.Equal(got, want) || signals != 3 {
		t.Errorf("after watch events: %v (%d signals), want %v (3)", got, signals, want)
	}
	if o, _, _ := s.GetByKey("b/web"); o.(*Pod).Status.PodIPs[0].IP != "10.0.0.8" {
		t.Errorf("b/web not updated: %v", o.(*Pod).Status.PodIPs)
	}
	// Relabelled out of its namespace's scope: gone, as for the scope's own watch.
	signals = 0
	_ = s.Update(apiPod("b", "web", "n2", "10.0.0.8", map[string]string{"app": "db"}))
	if got, want := cached(), []string{"a/p2"}; !slices.Equal(got, want) || signals != 1 {
		t.Errorf("after b/web was relabelled: %v (%d signals), want %v (1)", got, signals, want)
	}
}

// TestPlanWatches: up to maxNamespaceWatches namespaced scopes are watched one by one; past
// it, one cluster-wide watch serves them, kept while few are new to it (watched alone
// meanwhile) or no longer wanted, and made again past that.
func TestPlanWatches(t *testing.T) {
	namespaces := func(from, to int) []PodScope {
		var out []PodScope
		for i := from; i < to; i++ {
			out = append(out, PodScope{Namespace: fmt.Sprintf("ns%03d", i)})
		}
		return out
	}
	covering := func(scopes []PodScope) map[PodScope]bool {
		m := map[PodScope]bool{}
		for _, sc := range scopes {
			m[sc] = true
		}
		return m
	}
	gw := PodScope{Selector: "app=gw"}
	const max = maxNamespaceWatches
	for _, c := range []struct {
		name         string
		want         []PodScope
		covered      map[PodScope]bool
		single, wide int
		keepWide     bool
	}{
		{"few namespaces", append(namespaces(0, max), gw), nil, max + 1, 0, false},
		{"few namespaces, a wide watch running", append(namespaces(0, max), gw), covering(namespaces(0, 100)), max + 1, 0, false},
		{"many namespaces", append(namespaces(0, 100), gw), nil, 1, 100, false},
		{"many, each twice", append(namespaces(0, 100), namespaces(0, 100)...), nil, 0, 100, false},
		{"many, all covered", namespaces(0, 100), covering(namespaces(0, 100)), 0, 0, true},
		{"some new to the running watch", namespaces(0, 100+max), covering(namespaces(0, 100)), max, 0, true},
		{"too many new", namespaces(0, 101+max), covering(namespaces(0, 100)), 0, 101 + max, false},
		{"some no longer wanted", namespaces(max, 100), covering(namespaces(0, 100)), 0, 0, true},
		{"too many no longer wanted", namespaces(max+1, 100), covering(namespaces(0, 100)), 0, 99 - max, false},
	} {
		single, wide, keep := planWatches(c.want, c.covered)
		if len(single) != c.single || len(wide) != c.wide || keep != c.keepWide {
			t.Errorf("%s: %d single, %d in a new wide watch, keep the running one %v; want %d, %d, %v",
				c.name, len(single), len(wide), keep, c.single, c.wide, c.keepWide)
		}
	}
}
