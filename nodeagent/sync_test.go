package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/record"

	ovnlisters "github.com/egressd/egressd/api/generated/listers/k8sovn/v1"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/egressservice"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// recordingApplier counts applies, keeps the last state, and fails the first failFirst ones.
type recordingApplier struct {
	mu        sync.Mutex
	n         atomic.Int32
	failFirst int32
	// failing is what the failed applies fail (pod "p" when unset); removals: they fail a
	// removal instead, and no object.
	failing  dataplane.Origin
	removals bool
	last     dataplane.State
}

func (a *recordingApplier) Apply(_ context.Context, s *dataplane.State) dataplane.Result {
	n := a.n.Add(1)
	a.mu.Lock()
	a.last = *s
	a.mu.Unlock()
	if n <= a.failFirst && a.removals {
		return dataplane.Result{Removals: map[string]error{"routing": errors.New("delete rule 6101: operation not permitted")}}
	}
	if n <= a.failFirst {
		o := a.failing
		if o == (dataplane.Origin{}) {
			o = dataplane.Origin{Kind: "Pod", Name: "p"}
		}
		return dataplane.Result{Failed: map[dataplane.Origin]error{o: errors.New("no route to pod address 10.244.0.5")}}
	}
	return dataplane.Result{}
}

func (a *recordingApplier) state() dataplane.State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// newLoop is a loop of node "n" over an empty snapshot; set changes its settings and
// dependencies before New builds it.
func newLoop(app dataplane.Applier, changed chan struct{}, debounce time.Duration, set ...func(*Config, *Deps)) *SyncLoop {
	cfg := Config{Node: "n", Debounce: debounce, Resync: time.Hour}
	deps := Deps{Changed: changed, Applier: app, Metrics: NewMetrics(), Snapshot: watcherstest.Snapshot(), DNS: noNames{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, f := range set {
		f(&cfg, &deps)
	}
	return New(cfg, deps)
}

func run(t *testing.T, l *SyncLoop) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// settle, in a synctest bubble, moves the fake clock by d (at once) and returns when the loop
// is durably blocked again: what was due by then has happened, and nothing more will happen
// until the clock moves again.
func settle(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// Changes arriving within the debounce window of the first cost one sync for all of them; a
// loop without debounce would sync for each. On the bubble's fake clock.
func TestSyncLoopDebouncesBursts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		changed := make(chan struct{}, 1)
		app := &recordingApplier{}
		l := newLoop(app, changed, 300*time.Millisecond)
		run(t, l)
		settle(0)
		if !l.Synced() {
			t.Fatal("no first sync")
		}
		for range 10 { // like an informer: a full channel means a sync is already pending
			select {
			case changed <- struct{}{}:
			default:
			}
			settle(10 * time.Millisecond) // the changes are spread over 100 ms
		}
		// One sync for the burst: the sync starts after the last change (the fake clock does not
		// move during it), so none came during it.
		settle(2 * l.cfg.Debounce)
		if n := app.n.Load() - 1; n != 1 {
			t.Errorf("10 changes over 100 ms caused %d syncs, want 1", n)
		}
	})
}

// A change after a quiet period syncs at once; one right after a sync waits out the debounce.
// On the bubble's fake clock.
func TestSyncLoopSyncsIsolatedChangeAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		changed := make(chan struct{}, 1)
		app := &recordingApplier{}
		l := newLoop(app, changed, 300*time.Millisecond)
		run(t, l)
		settle(time.Second) // quiet since the first sync
		changed <- struct{}{}
		settle(0) // a sync without the fake clock moving
		if n := app.n.Load(); n != 2 {
			t.Fatalf("%d syncs after a change a second after the last sync, want 2", n)
		}
		changed <- struct{}{} // at once after that sync: a burst
		settle(l.cfg.Debounce - time.Millisecond)
		if n := app.n.Load(); n != 2 {
			t.Fatalf("%d syncs before the debounce passed since the last, want 2", n)
		}
		settle(time.Millisecond)
		if n := app.n.Load(); n != 3 {
			t.Errorf("%d syncs once the debounce passed since the last, want 3", n)
		}
	})
}

// The resync comes a period after the last sync, whatever caused it: the dataplane's full pass
// asks for a sync every period as well, and the two make one sync, not two.
func TestSyncLoopResyncsAPeriodAfterTheLastSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		changed := make(chan struct{}, 1)
		app := &recordingApplier{}
		l := newLoop(app, changed, time.Millisecond, func(c *Config, _ *Deps) { c.Resync = time.Minute })
		run(t, l)
		settle(40 * time.Second)
		changed <- struct{}{} // the full pass's request, say
		settle(0)
		settle(30 * time.Second) // a minute after the first sync, 30 s after the last
		if n := app.n.Load(); n != 2 {
			t.Fatalf("%d syncs a minute after the first, 30 s after the second, want 2", n)
		}
		settle(30 * time.Second) // a minute after the last
		if n := app.n.Load(); n != 3 {
			t.Errorf("%d syncs a minute after the last, want 3 (the resync)", n)
		}
	})
}

// A failed apply is retried by itself, without waiting for a change or the resync (an hour:
// the bubble's fake clock never reaches it here).
func TestSyncLoopRetriesFailedApply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		app := &recordingApplier{failFirst: 3}
		l := newLoop(app, make(chan struct{}), time.Millisecond)
		run(t, l)
		settle(0)
		if n := app.n.Load(); n != 1 {
			t.Fatalf("applies %d before any retry was due, want 1", n)
		}
		settle(retryFirst + 2*retryFirst + 4*retryFirst) // three retries, backing off
		if n := app.n.Load(); n != 4 {
			t.Fatalf("applies %d, want 4 (1 + 3 retries)", n)
		}
		settle(retryMax) // succeeded: no more retries, not even after the longest backoff
		if n := app.n.Load(); n != 4 {
			t.Errorf("applies %d, want 4 (1 + 3 retries, none after success)", n)
		}
	})
}

// A removal that failed is retried by itself, with the backoff of a failed apply, though no
// object failed; once it succeeds, nothing more is retried.
func TestSyncLoopRetriesFailedRemovals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		app := &recordingApplier{failFirst: 3, removals: true}
		l := newLoop(app, make(chan struct{}), time.Millisecond)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { l.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		synctest.Wait()
		for i, delay := range []time.Duration{retryFirst, 2 * retryFirst, 4 * retryFirst} {
			time.Sleep(delay - time.Nanosecond) // the bubble's clock
			synctest.Wait()
			if n := app.n.Load(); n != int32(i+1) {
				t.Fatalf("applies %d just before retry %d is due, want %d", n, i+1, i+1)
			}
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			if n := app.n.Load(); n != int32(i+2) {
				t.Fatalf("applies %d after a backoff of %s, want %d (retry %d)", n, delay, i+2, i+1)
			}
		}
		time.Sleep(time.Hour - time.Second) // the resync period is an hour
		synctest.Wait()
		if n := app.n.Load(); n != 4 {
			t.Errorf("applies %d, want 4 (1 + 3 retries, none after the removals succeeded)", n)
		}
	})
}

// failingFirewalls is a lister that fails while broken is set.
type failingFirewalls struct {
	ovnlisters.EgressFirewallLister
	broken *atomic.Bool
}

func (f failingFirewalls) List(s labels.Selector) ([]*ovnv1.EgressFirewall, error) {
	if f.broken.Load() {
		return nil, errors.New("cache broken")
	}
	return f.EgressFirewallLister.List(s)
}

// A feature whose compile fails keeps its previous part: the firewall stays enforced.
func TestSyncLoopKeepsPartOfFailedCompile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ef := &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "default", UID: "u"}, Spec: ovnv1.EgressFirewallSpec{
			Egress: []ovnv1.EgressFirewallRule{{Type: "Deny", To: ovnv1.EgressFirewallDestination{CIDRSelector: "0.0.0.0/0"}}}}}
		changed := make(chan struct{}, 1)
		app := &recordingApplier{}
		snap := watcherstest.Snapshot(ef, pod("a", "p", "n", nil, "10.244.0.5"))
		broken := &atomic.Bool{}
		snap.EgressFirewalls = failingFirewalls{snap.EgressFirewalls, broken}
		l := newLoop(app, changed, time.Millisecond, func(_ *Config, d *Deps) { d.Snapshot = snap })
		run(t, l)
		settle(0)
		if !l.Synced() {
			t.Fatal("no first sync")
		}
		if fws := app.state().Classifier.Firewalls; len(fws) != 1 {
			t.Fatalf("first sync: firewalls %+v", fws)
		}
		broken.Store(true)
		changed <- struct{}{}
		settle(l.cfg.Debounce)
		if n := app.n.Load(); n != 2 {
			t.Fatalf("%d applies, want 2: the first, and one with the lister failing", n)
		}
		if fws := app.state().Classifier.Firewalls; len(fws) != 1 || len(fws[0].Rules) != 1 {
			t.Errorf("after a failed compile: firewalls %+v, want the previous one", fws)
		}
	})
}

// The kernel's changes are paced as the API's: one after a quiet period syncs at once, a burst
// (a new veth's link events) costs one more sync after the debounce (what is pending when it
// starts is in it), and one that came during a sync (after the dataplane read its news) is not
// taken as covered by it.
func TestSyncLoopPacesKernelChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kernel := make(chan struct{}, 1)
		app := &kernelApplier{kernel: kernel}
		l := newLoop(app, make(chan struct{}), 10*time.Millisecond, func(_ *Config, d *Deps) { d.Kernel = kernel })
		run(t, l)
		settle(time.Second) // quiet since the first sync
		kernel <- struct{}{}
		settle(0)
		if n := app.n.Load(); n != 2 {
			t.Fatalf("%d syncs after an isolated kernel change, want 2: it syncs at once", n)
		}
		for range 3 { // the link events of a new veth, right after that sync
			select {
			case kernel <- struct{}{}:
			default:
			}
			settle(time.Millisecond)
		}
		if n := app.n.Load(); n != 2 {
			t.Fatalf("%d syncs within the debounce, want 2", n)
		}
		settle(10 * time.Millisecond)
		if n := app.n.Load(); n != 3 {
			t.Fatalf("%d syncs after the debounce, want 3: one for the burst", n)
		}
		app.during.Store(true) // the next sync's apply hears of a change
		settle(time.Second)
		kernel <- struct{}{}
		settle(0)
		settle(10 * time.Millisecond)
		if n := app.n.Load(); n != 5 {
			t.Errorf("%d syncs, want 5: the change heard during the 4th has a sync of its own", n)
		}
	})
}

// kernelApplier is a recordingApplier that, once during is set, signals a kernel change during
// one apply, as the dataplane does when the kernel changes while it applies.
type kernelApplier struct {
	recordingApplier
	kernel chan struct{}
	during atomic.Bool
}

func (a *kernelApplier) Apply(ctx context.Context, s *dataplane.State) dataplane.Result {
	res := a.recordingApplier.Apply(ctx, s)
	if a.during.Swap(false) {
		a.kernel <- struct{}{}
	}
	return res
}

// noNames is a resolver that knows no name.
type noNames struct{}

func (noNames) Want([]string)              {}
func (noNames) Lookup(string) []netip.Addr { return nil }
func (noNames) Changed() <-chan struct{}   { return nil }
func (noNames) Generation() uint64         { return 0 }
func (noNames) Applied(uint64)             {}
func (noNames) Capped() map[string]string  { return nil }

// recordingReporter keeps the last reported outcome.
type recordingReporter struct {
	mu      sync.Mutex
	objects map[dataplane.Origin]error
}

func (r *recordingReporter) Report(objects cluster.Outcomes, _ map[dataplane.Origin]string, _ dataplane.Result, _ watchers.Captured) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.objects = maps.Collect(objects.All())
}

// An EgressQoS the API accepts but that cannot be compiled (a podSelector with an invalid
// operator) reports its failure, although the dataplane, keeping the previous rules, has
// nothing to say about it.
func TestSyncLoopReportsCompileFailures(t *testing.T) {
	q := &ovnv1.EgressQoS{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "default"}, Spec: ovnv1.EgressQoSSpec{Egress: []ovnv1.EgressQoSRule{
		{DSCP: 46, PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}}}}}
	rep := &recordingReporter{}
	l := newLoop(&recordingApplier{}, make(chan struct{}), time.Millisecond, func(_ *Config, d *Deps) {
		d.Snapshot, d.Status = watcherstest.Snapshot(q), rep
	})
	l.sync(context.Background())
	rep.mu.Lock()
	defer rep.mu.Unlock()
	err := rep.objects[dataplane.Origin{Kind: "EgressQoS", Namespace: "a", Name: "default"}]
	if err == nil || !strings.Contains(err.Error(), "Bogus") {
		t.Errorf("EgressQoS a/default reported %v, want its invalid podSelector", err)
	}
}

// The classifier gets the EgressQoS of the namespaces with a pod on the node only, and every
// EgressQoS still reports its outcome: one elsewhere, valid or not, and one whose namespace's
// first pod arrives gets its rules then.
func TestSyncLoopClassifiesLocalNamespacesQoS(t *testing.T) {
	qos := func(ns, op string) *ovnv1.EgressQoS {
		return &ovnv1.EgressQoS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}, Spec: ovnv1.EgressQoSSpec{Egress: []ovnv1.EgressQoSRule{
			{DSCP: 46, PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOperator(op)}}}}}}}
	}
	origin := func(ns string) dataplane.Origin {
		return dataplane.Origin{Kind: "EgressQoS", Namespace: ns, Name: "default"}
	}
	classified := func(app *recordingApplier) []string {
		var out []string
		for _, q := range app.state().Classifier.QoS {
			out = append(out, q.Origin.Namespace)
		}
		slices.Sort(out)
		return out
	}
	rep, app := &recordingReporter{}, &recordingApplier{}
	snap := watcherstest.Snapshot(qos("local", "Exists"), qos("elsewhere", "Exists"), qos("broken", "Bogus"),
		pod("local", "p", "n", nil, "10.244.0.5"), pod("elsewhere", "q", "other", nil, "10.244.1.5"))
	l := newLoop(app, make(chan struct{}), time.Millisecond, func(_ *Config, d *Deps) { d.Snapshot, d.Status = snap, rep })
	l.sync(context.Background())
	if got := classified(app); !slices.Equal(got, []string{"local"}) {
		t.Errorf("classifier's EgressQoS of namespaces %v, want [local]", got)
	}
	rep.mu.Lock()
	for _, ns := range []string{"local", "elsewhere", "broken"} {
		if err, ok := rep.objects[origin(ns)]; !ok || (err != nil) != (ns == "broken") {
			t.Errorf("EgressQoS %s/default reported %v (reported: %v)", ns, err, ok)
		}
	}
	rep.mu.Unlock()
	l.deps.Snapshot = watcherstest.Snapshot(qos("local", "Exists"), qos("elsewhere", "Exists"), qos("broken", "Bogus"),
		pod("local", "p", "n", nil, "10.244.0.5"), pod("elsewhere", "q", "n", nil, "10.244.0.6"))
	l.sync(context.Background())
	if got := classified(app); !slices.Equal(got, []string{"elsewhere", "local"}) {
		t.Errorf("after a pod of elsewhere arrived: classifier's EgressQoS of namespaces %v, want local and elsewhere", got)
	}
}

// A pod whose interface could not be found or attached shows in the status of its namespace's
// EgressFirewall: the policy is not in force for it.
func TestSyncLoopBlamesPodFailuresOnPolicies(t *testing.T) {
	ef := &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "default", UID: "u"}, Spec: ovnv1.EgressFirewallSpec{
		Egress: []ovnv1.EgressFirewallRule{{Type: "Deny", To: ovnv1.EgressFirewallDestination{CIDRSelector: "0.0.0.0/0"}}}}}
	other := &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "default", UID: "v"}}
	rep := &recordingReporter{}
	app := &recordingApplier{failFirst: 1, failing: dataplane.Origin{Kind: "Pod", Namespace: "ns", Name: "web"}}
	l := newLoop(app, make(chan struct{}), time.Millisecond, func(_ *Config, d *Deps) {
		d.Snapshot, d.Status = watcherstest.Snapshot(ef, other), rep
	})
	l.sync(context.Background())
	rep.mu.Lock()
	defer rep.mu.Unlock()
	err := rep.objects[dataplane.Origin{Kind: "EgressFirewall", Namespace: "ns", Name: "default"}]
	if err == nil || !strings.Contains(err.Error(), "pod web: no route to pod address 10.244.0.5") {
		t.Errorf("the pod's namespace's firewall reported %v, want the pod's failure", err)
	}
	if err := rep.objects[dataplane.Origin{Kind: "EgressFirewall", Namespace: "other", Name: "default"}]; err != nil {
		t.Errorf("another namespace's firewall reported %v", err)
	}
}

// Several pods' failures, and a pod's failures of both families, make one line in a stable
// order (pods by name), after what the policy itself failed: a status message is one line, as
// upstream's "[e1, e2]", and the same failures always make the same message.
func TestBlamePodsOneLine(t *testing.T) {
	ef := dataplane.Origin{Kind: "EgressFirewall", Namespace: "ns", Name: "default"}
	qos := dataplane.Origin{Kind: "EgressQoS", Namespace: "ns", Name: "default"}
	other := dataplane.Origin{Kind: "EgressFirewall", Namespace: "other", Name: "default"}
	failed := map[dataplane.Origin]error{
		{Kind: "Pod", Namespace: "ns", Name: "web"}: errors.Join(errors.New("no route to pod address 10.244.0.5"), errors.New("no route to pod address fd00::5")),
		{Kind: "Pod", Namespace: "ns", Name: "api"}: errors.New("attach: busy"),
	}
	outcomes := cluster.NewOutcomes(cluster.NewShared(map[dataplane.Origin]error{ef: errors.New("compile"), qos: nil, other: nil}))
	blamePods(outcomes, failed)
	objects := maps.Collect(outcomes.All())
	pods := "pod api: attach: busy, pod web: no route to pod address 10.244.0.5, pod web: no route to pod address fd00::5"
	if got := fmt.Sprint(objects[ef]); got != "[compile, "+pods+"]" {
		t.Errorf("firewall: %q", got)
	}
	if got := fmt.Sprint(objects[qos]); got != "["+pods+"]" {
		t.Errorf("qos: %q", got)
	}
	if objects[other] != nil {
		t.Errorf("another namespace: %v", objects[other])
	}
}

// An EgressService this node fails to program (it has no status field) gets a Warning event
// naming the node, once while it fails the same way.
func TestSyncLoopRecordsServiceFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := egressservice.Origin("a", "web")
		app := &recordingApplier{failFirst: 3, failing: o}
		rec := record.NewFakeRecorder(10)
		l := newLoop(app, make(chan struct{}), time.Millisecond, func(_ *Config, d *Deps) { d.Recorder = rec })
		run(t, l)
		settle(retryFirst + 2*retryFirst + 4*retryFirst) // the three retries
		if n := app.n.Load(); n != 4 {
			t.Fatalf("%d applies, want 4: three failed, the last not", n)
		}
		select {
		case e := <-rec.Events:
			if want := "Warning EgressServiceNotApplied n: no route to pod address 10.244.0.5"; e != want {
				t.Errorf("event %q, want %q", e, want)
			}
		default:
			t.Fatal("no event")
		}
		if len(rec.Events) != 0 {
			t.Errorf("%d more events for the same failure", len(rec.Events))
		}
	})
}

// A trigger (a pod whose CNI ADD waits, an urgent kernel change) does not wait out the debounce of an API change that
// came just before it.
func TestSyncLoopTriggerCutsDebounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		changed, trigger := make(chan struct{}, 1), make(chan struct{}, 1)
		app := &recordingApplier{}
		l := newLoop(app, changed, time.Hour, func(_ *Config, d *Deps) { d.Urgent = trigger })
		run(t, l)
		settle(0)
		if !l.Synced() {
			t.Fatal("no first sync")
		}
		changed <- struct{}{}
		settle(10 * time.Millisecond) // the loop is in the debounce
		if n := app.n.Load(); n != 1 {
			t.Fatalf("%d syncs within the hour's debounce and before the trigger, want 1", n)
		}
		trigger <- struct{}{}
		settle(0) // a sync for the trigger, without the fake clock moving
		if n := app.n.Load(); n != 2 {
			t.Fatalf("%d syncs after the trigger, within the hour's debounce, want 2", n)
		}
		settle(time.Minute) // the change was covered by that sync: no more
		if n := app.n.Load(); n != 2 {
			t.Errorf("%d syncs, want 2 (the first, and one for the change and the trigger)", n)
		}
	})
}
