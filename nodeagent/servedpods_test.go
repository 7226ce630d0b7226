package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"github.com/prometheus/client_golang/prometheus/testutil"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// orderedApplier notes its applies in a shared journal.
type orderedApplier struct{ journal *[]string }

func (a orderedApplier) Apply(context.Context, *dataplane.State) dataplane.Result {
	*a.journal = append(*a.journal, "apply")
	return dataplane.Result{}
}

// TestSyncServesThePodsItsFeaturesRead: before it compiles, a sync asks for the other nodes'
// pods its features read, each scope once: on an egress node the pods of its EgressIPs, and
// the gateway pods of the policies' dynamic hops; with the legacy annotations, every pod.
func TestSyncServesThePodsItsFeaturesRead(t *testing.T) {
	hop := ovnv1.DynamicHop{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "gw"}},
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"gw": "yes"}}}
	snap := watcherstest.Snapshot(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{egressip.AssignableLabel: ""}}},
		&ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "e"}, Spec: ovnv1.EgressIPSpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
			Status: ovnv1.EgressIPStatus{Items: []ovnv1.EgressIPStatusItem{{Node: "n", EgressIP: "192.0.2.100"}}}},
		&ovnv1.AdminPolicyBasedExternalRoute{ObjectMeta: metav1.ObjectMeta{Name: "p1"}, Spec: ovnv1.ExternalRouteSpec{
			NextHops: ovnv1.ExternalNextHops{DynamicHops: []*ovnv1.DynamicHop{&hop}}}},
		&ovnv1.AdminPolicyBasedExternalRoute{ObjectMeta: metav1.ObjectMeta{Name: "p2"}, Spec: ovnv1.ExternalRouteSpec{
			NextHops: ovnv1.ExternalNextHops{DynamicHops: []*ovnv1.DynamicHop{&hop}}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gws", Labels: map[string]string{"gw": "yes"}}})
	for _, legacy := range []bool{false, true} {
		var journal []string
		var asked []watchers.PodScope
		l := newLoop(orderedApplier{&journal}, make(chan struct{}), 0, func(c *Config, d *Deps) {
			c.LegacyGateways = legacy
			d.Snapshot, d.Recorder = snap, record.NewFakeRecorder(100)
			d.ServePods = func(_ context.Context, scopes []watchers.PodScope) error {
				journal = append(journal, "serve")
				asked = scopes
				return nil
			}
		})
		l.sync(t.Context())
		want := []watchers.PodScope{{Selector: "app=gw"}, {Selector: "app=web"}}
		if legacy {
			want = []watchers.PodScope{{}, {Selector: "app=web"}}
		}
		if !slices.Equal(asked, want) || !slices.Equal(journal, []string{"serve", "apply"}) {
			t.Errorf("legacy %v: asked for %v (calls %v), want %v before the apply", legacy, asked, journal, want)
		}
		if n := testutil.ToFloat64(l.deps.Metrics.ServedPodScopes); n != 2 {
			t.Errorf("egressd_served_pod_scopes = %v, want 2", n)
		}
	}
}

// fakeReader is a feature that reads the given scopes of other nodes' pods.
type fakeReader struct{ scopes []watchers.PodScope }

func (fakeReader) name() string                         { return "fake" }
func (fakeReader) compile(*cluster.Input, *parts) error { return nil }
func (f fakeReader) servedPods(*watchers.Snapshot, string) ([]watchers.PodScope, error) {
	return f.scopes, nil
}

// TestSyncAsksForEveryNamespace: the agent asks for each namespace's scope, however many, and
// each once (how many watches serve them is the watchers' choice).
func TestSyncAsksForEveryNamespace(t *testing.T) {
	scopes := []watchers.PodScope{{Selector: "app=gw"}}
	for i := range 100 {
		scopes = append(scopes, watchers.PodScope{Namespace: fmt.Sprintf("ns%05d", i)})
	}
	var asked []watchers.PodScope
	l := newLoop(&recordingApplier{}, make(chan struct{}), 0, func(_ *Config, d *Deps) {
		d.ServePods = func(_ context.Context, s []watchers.PodScope) error { asked = s; return nil }
	})
	l.features = []feature{fakeReader{append(scopes, scopes[1:]...)}}
	l.sync(t.Context())
	if len(asked) != len(scopes) {
		t.Errorf("asked for %d scopes, want %d", len(asked), len(scopes))
	}
}

// failingReader is a feature that cannot name the pods it reads.
type failingReader struct{ fakeReader }

func (failingReader) servedPods(*watchers.Snapshot, string) ([]watchers.PodScope, error) {
	return nil, errors.New("egressips: the cache is gone")
}

// TestSyncKeepsServedPodsWhenAFeatureCannotName: a feature that cannot say which pods it reads
// leaves the served scopes as they were (nothing is stopped on a lister's error).
func TestSyncKeepsServedPodsWhenAFeatureCannotName(t *testing.T) {
	calls := 0
	l := newLoop(&recordingApplier{}, make(chan struct{}), 0, func(_ *Config, d *Deps) {
		d.ServePods = func(context.Context, []watchers.PodScope) error { calls++; return nil }
	})
	l.features = []feature{fakeReader{[]watchers.PodScope{{Selector: "app=gw"}}}}
	l.sync(t.Context())
	l.features = append(l.features, failingReader{})
	l.sync(t.Context())
	if calls != 1 || len(l.served) != 1 {
		t.Errorf("ServePods called %d times, scopes %v: want once, the first sync's scope kept", calls, l.served)
	}
}

// TestSyncWaitsForServedPodsFirst: an agent's first sync waits for the served pods as long as
// it takes (what its predecessor programmed stays meanwhile); later syncs wait servePodsWait
// at most, then compile without the pods that have not arrived.
func TestSyncWaitsForServedPodsFirst(t *testing.T) {
	var deadlines []bool
	l := newLoop(&recordingApplier{}, make(chan struct{}), 0, func(_ *Config, d *Deps) {
		d.ServePods = func(ctx context.Context, _ []watchers.PodScope) error {
			_, ok := ctx.Deadline()
			deadlines = append(deadlines, ok)
			return nil
		}
	})
	l.sync(t.Context())
	l.sync(t.Context())
	if !slices.Equal(deadlines, []bool{false, true}) {
		t.Errorf("deadlines of the first two syncs' waits: %v, want none then one", deadlines)
	}
}

// TestEgressIPsServedPodsKeptWhileTheirInputsStay: an egress node names its EgressIPs' scopes
// again only when an EgressIP, a Namespace or a Node changed; a pod's change reuses them.
func TestEgressIPsServedPodsKeptWhileTheirInputsStay(t *testing.T) {
	objs := []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{egressip.AssignableLabel: ""}}},
		&ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "e"}, Spec: ovnv1.EgressIPSpec{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
			Status: ovnv1.EgressIPStatus{Items: []ovnv1.EgressIPStatusItem{{Node: "n", EgressIP: "192.0.2.100"}}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a1", Labels: map[string]string{"team": "a"}}},
	}
	gens := watchers.NewGenerations(&ovnv1.EgressIP{}, &corev1.Namespace{}, &corev1.Node{}, &corev1.Pod{})
	before := watcherstest.Snapshot(objs...)
	after := watcherstest.Snapshot(append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a2", Labels: map[string]string{"team": "a"}}})...)
	before.Generations, after.Generations = gens, gens
	f := &egressIPs{}
	served := func(snap *watchers.Snapshot) []watchers.PodScope {
		t.Helper()
		s, err := f.servedPods(snap, "n")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := served(before); len(got) != 1 {
		t.Fatalf("scopes %v, want a1's", got)
	}
	gens.Changed(&corev1.Pod{}, "")
	if got := served(after); len(got) != 1 {
		t.Errorf("after a pod's change: %v, want the scopes kept (a1's)", got)
	}
	gens.Changed(&corev1.Namespace{}, "")
	if got := served(after); len(got) != 2 {
		t.Errorf("after a namespace's change: %v, want a1's and a2's", got)
	}
}
