package egressfirewall

import (
	"fmt"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	ovnlisters "github.com/egressd/egressd/api/generated/listers/k8sovn/v1"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// A node checks every EgressFirewall, but after the first compile it looks again only at those
// the journal names (a change it was not told of stays unseen, which shows it did not walk
// them all), at those of namespaces no longer enforced here, and at every one when a change of
// unknown key came.
func TestCompileFirewallChecksWhatChanged(t *testing.T) {
	kind := &ovnv1.EgressFirewall{}
	snap, efs := journaled()
	valid, invalid := cidrRule("Deny", "10.0.0.0/8"), cidrRule("Deny", "not-a-cidr")
	put := func(e *ovnv1.EgressFirewall, told bool) {
		e.UID = types.UID(fmt.Sprintf("uid-%s%d", e.Namespace, e.Generation))
		if err := efs.Update(e); err != nil {
			t.Fatal(err)
		}
		if told {
			snap.Generations.Changed(kind, e.Namespace+"/"+e.Name)
		}
	}
	for _, ns := range []string{"a", "b", "c"} {
		put(ef(ns, valid), false)
	}
	c := &Compiler{}
	local := everywhere(ef("c"))
	statuses := func() map[string]bool { // namespace: its status is an error
		t.Helper()
		part, err := c.Compile(&cluster.Input{Snap: snap, Pods: local})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for o, err := range part.Statuses.All {
			out[o.Namespace] = err != nil
		}
		return out
	}
	want := func(step string, w map[string]bool) {
		t.Helper()
		if got := statuses(); !maps.Equal(got, w) {
			t.Errorf("%s: statuses (namespace: failed) %v, want %v", step, got, w)
		}
	}
	want("first compile", map[string]bool{"a": false, "b": false, "c": false})

	bad := ef("a", invalid)
	bad.Generation = 1
	put(bad, true)
	want("a made invalid, told", map[string]bool{"a": true, "b": false, "c": false})

	sneaky := ef("b", invalid)
	sneaky.Generation = 1
	put(sneaky, false)
	snap.Generations.Changed(&corev1.Node{}, "") // a sync for something else
	want("b made invalid, not told", map[string]bool{"a": true, "b": false, "c": false})

	if err := efs.Delete(bad); err != nil {
		t.Fatal(err)
	}
	snap.Generations.Changed(kind, "a/default")
	want("a deleted", map[string]bool{"b": false, "c": false})
	if _, ok := c.memo.firewalls["uid-a1"]; ok {
		t.Error("the memo still holds the deleted firewall")
	}

	cBad := ef("c", invalid)
	cBad.Generation = 1
	put(cBad, false) // enforced here: compiled at every compile of the list
	snap.Generations.Changed(&corev1.Node{}, "")
	want("c, enforced, made invalid", map[string]bool{"b": false, "c": true})

	local = nil // c's last pod went: c is only checked now
	want("c no longer enforced", map[string]bool{"b": false, "c": true})

	snap.Generations.Changed(kind, "") // a change of unknown key: every firewall looked at
	want("after a change of unknown key", map[string]bool{"b": true, "c": true})
}

// The statuses a part hands on are its own: a later compile does not change them.
func TestCompileFirewallStatusesOwned(t *testing.T) {
	kind := &ovnv1.EgressFirewall{}
	e := ef("a", cidrRule("Deny", "10.0.0.0/8"))
	snap := watcherstest.Snapshot(e)
	snap.Generations = watchers.NewGenerations(kind, &corev1.Node{}, &corev1.Namespace{}).Journaled(kind)
	c := &Compiler{}
	first, err := c.Compile(&cluster.Input{Snap: snap})
	if err != nil {
		t.Fatal(err)
	}
	e.Spec.Egress[0].To.CIDRSelector = "bad"
	e.Generation++
	snap.Generations.Changed(kind, "a/default")
	if _, err := c.Compile(&cluster.Input{Snap: snap}); err != nil {
		t.Fatal(err)
	}
	if err := first.Statuses.All[dataplane.Origin{Kind: cluster.KindEgressFirewall, Namespace: "a", Name: "default"}]; err != nil {
		t.Errorf("the first part's status changed with the second compile: %v", err)
	}
}

// A firewall the node enforced before the journal named it (the cache holds a change a moment
// before its handler records it) is forgotten by the memo when it goes.
func TestCompileFirewallForgetsEnforcedBeforeJournaled(t *testing.T) {
	kind := &ovnv1.EgressFirewall{}
	snap, efs := journaled()
	c := &Compiler{}
	in := &cluster.Input{Snap: snap, Pods: everywhere(ef("a"))}
	if _, err := c.Compile(in); err != nil {
		t.Fatal(err)
	}
	e := ef("a", cidrRule("Deny", "10.0.0.0/8"))
	e.UID = "uid-a"
	if err := efs.Add(e); err != nil {
		t.Fatal(err)
	}
	snap.Generations.Changed(&corev1.Node{}, "") // a sync before the handler's record
	if part, err := c.Compile(in); err != nil || len(part.Firewalls) != 1 {
		t.Fatalf("the firewall in the cache is not enforced: %+v, %v", part.Firewalls, err)
	}
	snap.Generations.Changed(kind, "a/default")
	if err := efs.Delete(e); err != nil {
		t.Fatal(err)
	}
	snap.Generations.Changed(kind, "a/default")
	if _, err := c.Compile(in); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.memo.firewalls["uid-a"]; ok || len(c.memo.lastValid) != 0 {
		t.Errorf("the memo still holds the deleted firewall (%d last valid)", len(c.memo.lastValid))
	}
}

// journaled is a snapshot whose generations journal the EgressFirewalls, held by efs.
func journaled() (*watchers.Snapshot, cache.Indexer) {
	kind := &ovnv1.EgressFirewall{}
	snap := watcherstest.Snapshot()
	snap.Generations = watchers.NewGenerations(kind, &corev1.Node{}, &corev1.Namespace{}).Journaled(kind)
	efs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	snap.EgressFirewalls = ovnlisters.NewEgressFirewallLister(efs)
	return snap, efs
}

// A part hands on the statuses of the last one while none changed (an edit that leaves a
// firewall valid, here or elsewhere), and a copy once one did: 10,000 statuses are not copied
// at every sync.
func TestCompileFirewallStatusesCopiedOnlyOnChange(t *testing.T) {
	kind := &ovnv1.EgressFirewall{}
	snap, efs := journaled()
	put := func(ns string, r ovnv1.EgressFirewallRule, gen int64) {
		e := ef(ns, r)
		e.Generation, e.UID = gen, types.UID("uid-"+ns)
		if err := efs.Update(e); err != nil {
			t.Fatal(err)
		}
		snap.Generations.Changed(kind, ns+"/default")
	}
	put("here", cidrRule("Deny", "10.0.0.0/8"), 1)
	put("there", cidrRule("Deny", "10.0.0.0/8"), 1)
	c := &Compiler{}
	local := everywhere(ef("here"))
	compile := func() map[dataplane.Origin]error {
		t.Helper()
		part, err := c.Compile(&cluster.Input{Snap: snap, Pods: local})
		if err != nil {
			t.Fatal(err)
		}
		return part.Statuses.All
	}
	same := func(a, b map[dataplane.Origin]error) bool { return fmt.Sprintf("%p", a) == fmt.Sprintf("%p", b) }
	last := compile()
	for _, step := range []struct {
		name    string
		edit    func()
		changed bool
	}{
		{"enforced firewall edited, still valid", func() { put("here", cidrRule("Allow", "10.0.0.0/8"), 2) }, false},
		{"other firewall edited, still valid", func() { put("there", cidrRule("Allow", "10.0.0.0/8"), 2) }, false},
		{"other firewall made invalid", func() { put("there", cidrRule("Deny", "not-a-cidr"), 3) }, true},
		{"enforced firewall made invalid", func() { put("here", cidrRule("Deny", "not-a-cidr"), 3) }, true},
		{"namespace no longer enforced, status the same", func() { local = nil }, false},
		{"other firewall valid again", func() { put("there", cidrRule("Deny", "10.0.0.0/8"), 4) }, true},
	} {
		step.edit()
		got := compile()
		if same(got, last) == step.changed {
			t.Errorf("%s: a new copy of the statuses %v, want %v", step.name, !same(got, last), step.changed)
		}
		last = got
	}
	if last[origin("here", "default")] == nil || last[origin("there", "default")] != nil || len(last) != 2 {
		t.Errorf("statuses at the end %v, want here invalid, there valid", last)
	}
}
