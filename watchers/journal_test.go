package watchers

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

func TestChangedSince(t *testing.T) {
	ef := &ovnv1.EgressFirewall{}
	g := NewGenerations(ef, &corev1.Node{}).Journaled(ef)
	_, start, ok := g.ChangedSince(ef, 0)
	if !ok || start != 0 {
		t.Fatalf("an empty journal: cursor %d, ok %v", start, ok)
	}
	g.Changed(ef, "a/default")
	g.Changed(ef, "b/default")
	g.Changed(ef, "a/default")
	keys, next, ok := g.ChangedSince(ef, start)
	if !ok || !slices.Equal(keys, []string{"a/default", "b/default"}) || next != 3 {
		t.Errorf("after three changes: %v, cursor %d, ok %v; want [a/default b/default], 3, true", keys, next, ok)
	}
	if gen, _ := g.Of(ef); gen != 3 {
		t.Errorf("generation %d after three changes, want 3", gen)
	}
	if keys, _, ok := g.ChangedSince(ef, next); !ok || len(keys) != 0 {
		t.Errorf("nothing changed since: %v, ok %v", keys, ok)
	}

	g.Changed(ef, "") // a change without its key: the reader must look at everything
	if _, next2, ok := g.ChangedSince(ef, next); ok || next2 != 4 {
		t.Errorf("a change of unknown key: ok %v, cursor %d; want false, 4", ok, next2)
	}
	g.Changed(ef, "c/default")
	if keys, _, ok := g.ChangedSince(ef, 4); !ok || !slices.Equal(keys, []string{"c/default"}) {
		t.Errorf("after it: %v, ok %v", keys, ok)
	}

	for i := range journalSize {
		g.Changed(ef, fmt.Sprintf("n%d/default", i))
	}
	if _, _, ok := g.ChangedSince(ef, 4); ok {
		t.Error("more changes than the journal keeps: ok")
	}
	_, last, _ := g.ChangedSince(ef, 0)
	g.Changed(ef, "d/default")
	if keys, _, ok := g.ChangedSince(ef, last); !ok || !slices.Equal(keys, []string{"d/default"}) {
		t.Errorf("once trimmed: %v, ok %v", keys, ok)
	}

	if _, _, ok := g.ChangedSince(&corev1.Node{}, 0); ok {
		t.Error("a kind not journaled: ok")
	}
	if _, _, ok := (*Generations)(nil).ChangedSince(ef, 0); ok {
		t.Error("no generations: ok")
	}
	if _, _, ok := g.Adding(ef, 1).ChangedSince(ef, last); !ok {
		t.Error("generations with an overlay lost the journal")
	}
	over := g.Adding(ef, 1, "x/default")
	if keys := over.Adding(ef, 1, "y/default").Overlaid(ef); !slices.Equal(keys, []string{"x/default", "y/default"}) {
		t.Errorf("overlaid %v, want both overlays' keys", keys)
	}
	if keys := over.Overlaid(ef); !slices.Equal(keys, []string{"x/default"}) {
		t.Errorf("an overlay over it changed the overlaid keys: %v", keys)
	}
	if keys := g.Overlaid(ef); keys != nil {
		t.Errorf("the caches' generations have overlaid keys %v", keys)
	}
}

// A Follower gives the journal's keys since its last look, with the overlay's keys now and the
// time before; nothing it does not know.
func TestFollower(t *testing.T) {
	pod := &corev1.Pod{}
	g := NewGenerations(pod).Journaled(pod)
	var f Follower
	if _, ok := f.Changed(g, pod); !ok {
		t.Fatal("nothing changed: not known")
	}
	g.Changed(pod, "a/p1")
	if keys, ok := f.Changed(g.Adding(pod, 1, "a/announced"), pod); !ok || !slices.Equal(keys, []string{"a/p1", "a/announced"}) {
		t.Errorf("a change and an overlay: %v, ok %v", keys, ok)
	}
	if keys, ok := f.Changed(g, pod); !ok || !slices.Equal(keys, []string{"a/announced"}) {
		t.Errorf("the overlay gone: %v, ok %v, want the pod it listed", keys, ok)
	}
	if keys, ok := f.Changed(g, pod); !ok || len(keys) != 0 {
		t.Errorf("nothing since: %v, ok %v", keys, ok)
	}
	g.Changed(pod, "")
	if _, ok := f.Changed(g, pod); ok {
		t.Error("a change of unknown key: known")
	}
}
