package status

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/egressd/egressd/api/generated/clientset/versioned/fake"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// firewallWrites makes client count the patches of EgressFirewalls by namespace; the count
// returned is a copy of the counts so far.
func firewallWrites(client *fake.Clientset) (count func() map[string]int) {
	var mu sync.Mutex
	writes := map[string]int{}
	client.PrependReactor("patch", "egressfirewalls", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		writes[a.GetNamespace()]++
		return true, &ovnv1.EgressFirewall{}, nil
	})
	return func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(writes)
	}
}

// A sync's report looks again only at the firewalls whose outcome changed (a report follows
// every pod's sync); a change of the objects looks at all of them again. In a bubble: each
// check is made once the writer is durably blocked, past the coalesce window; "writes nothing"
// holds at quiescence, not for a wall-clock while.
func TestWriterLooksAgainAtChangedOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		efs := []*ovnv1.EgressFirewall{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "default"}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "default"}},
		}
		client := fake.NewSimpleClientset()
		count := firewallWrites(client)
		changed := make(chan struct{}, 1)
		// The snapshot never shows the entries written: every look at an entry writes it.
		w := &Writer{Node: "n1", Client: client, Snapshot: watcherstest.Snapshot(efs[0], efs[1]), Changed: changed,
			Recorder: record.NewFakeRecorder(10), Log: slog.New(slog.DiscardHandler)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go w.Run(ctx)
		origin := func(ns string) dataplane.Origin {
			return dataplane.Origin{Kind: cluster.KindEgressFirewall, Namespace: ns, Name: "default"}
		}
		// settled checks the writes once the writer has taken what was reported: the bubble's
		// clock past the coalesce window, and the writer durably blocked again.
		settled := func(what string, want map[string]int) {
			t.Helper()
			time.Sleep(coalesce) // the fake clock: instant
			synctest.Wait()
			if got := count(); got["a"] != want["a"] || got["b"] != want["b"] {
				t.Fatalf("%s: writes %v, want %v", what, got, want)
			}
		}
		w.Report(cluster.NewOutcomes(cluster.NewShared(map[dataplane.Origin]error{origin("a"): nil, origin("b"): nil})), nil, dataplane.Result{})
		settled("first report", map[string]int{"a": 1, "b": 1})
		w.Report(cluster.NewOutcomes(cluster.NewShared(map[dataplane.Origin]error{origin("a"): nil, origin("b"): errors.New("boom")})), nil, dataplane.Result{})
		settled("b failed", map[string]int{"a": 1, "b": 2})
		w.Report(cluster.NewOutcomes(cluster.NewShared(map[dataplane.Origin]error{origin("a"): nil, origin("b"): errors.New("boom")})), nil, dataplane.Result{})
		settled("the same outcomes again", map[string]int{"a": 1, "b": 2})
		changed <- struct{}{}
		settled("the objects changed, not yet looked at", map[string]int{"a": 1, "b": 2})
		changed <- struct{}{} // gathered with the first
		time.Sleep(recheckDelay)
		settled("the objects changed", map[string]int{"a": 2, "b": 3})
		// a is gone from a sync (b recovers in it: the write shows the writer took that report),
		// then back (made again): its entry is written again.
		w.Report(cluster.NewOutcomes(cluster.NewShared(map[dataplane.Origin]error{origin("b"): nil})), nil, dataplane.Result{})
		settled("a gone", map[string]int{"a": 2, "b": 4})
		w.Report(cluster.NewOutcomes(cluster.NewShared(map[dataplane.Origin]error{origin("a"): nil, origin("b"): nil})), nil, dataplane.Result{})
		settled("a back", map[string]int{"a": 3, "b": 4})
		// A burst of syncs (pods starting) reports b failing and recovering, ending as written:
		// the writer takes the latest report only, and writes nothing.
		for i := range 10 {
			var err error
			if i < 9 {
				err = errors.New("boom")
			}
			w.Report(cluster.NewOutcomes(cluster.NewShared(map[dataplane.Origin]error{origin("a"): nil, origin("b"): err})), nil, dataplane.Result{})
		}
		settled("a burst ending as written", map[string]int{"a": 3, "b": 4})
		// A note on a (its namespace's DNS answers capped) is a new entry; once.
		noted := map[dataplane.Origin]string{origin("a"): "DNS answers to its pods are not learned"}
		w.Report(cluster.NewOutcomes(cluster.NewShared(map[dataplane.Origin]error{origin("a"): nil, origin("b"): nil})), noted, dataplane.Result{})
		settled("a noted", map[string]int{"a": 4, "b": 4})
		w.Report(cluster.NewOutcomes(cluster.NewShared(map[dataplane.Origin]error{origin("a"): nil, origin("b"): nil})), noted, dataplane.Result{})
		settled("a noted again", map[string]int{"a": 4, "b": 4})
		w.Report(cluster.NewOutcomes(cluster.NewShared(map[dataplane.Origin]error{origin("a"): nil, origin("b"): nil})), nil, dataplane.Result{})
		settled("a's note gone", map[string]int{"a": 5, "b": 4})
	})
}

// A write that fails (the API server away) is tried again on its own, with a growing wait, and
// not only at the next sync's report: an idle node's entry appears once the API server is back.
func TestWriterRetriesFailedWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ef := &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "default"}}
		client := fake.NewSimpleClientset()
		var mu sync.Mutex
		attempts, down := 0, true
		client.PrependReactor("patch", "egressfirewalls", func(k8stesting.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			attempts++
			if down {
				return true, nil, errors.New("connection refused")
			}
			return true, &ovnv1.EgressFirewall{}, nil
		})
		w := &Writer{Node: "n1", Client: client, Snapshot: watcherstest.Snapshot(ef),
			Recorder: record.NewFakeRecorder(10), Log: slog.New(slog.DiscardHandler)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go w.Run(ctx)
		w.Report(cluster.NewOutcomes(cluster.NewShared(map[dataplane.Origin]error{{Kind: cluster.KindEgressFirewall, Namespace: "a", Name: "default"}: nil})), nil, dataplane.Result{})
		time.Sleep(time.Minute)
		synctest.Wait()
		mu.Lock()
		// At 0 s, then 1, 2, 4, 8, 16, 30 s after each: 5 tries in the first minute.
		if attempts < 4 || attempts > 8 {
			t.Errorf("%d attempts in a minute of outage, want a retry with a growing wait", attempts)
		}
		down, attempts = false, 0
		mu.Unlock()
		time.Sleep(retryMax)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if attempts != 1 {
			t.Errorf("%d writes once the API server was back, want 1 (and none after it succeeded)", attempts)
		}
	})
}

// A firewall created while the agent writes the entries of the thousand it found at start has
// its entry written next, not after theirs: each write takes the API server 100 ms here.
func TestWriterPutsNewEntriesAheadOfTheBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const backlog = 1000
		var efs []runtime.Object
		objects := map[dataplane.Origin]error{}
		for i := range backlog + 1 {
			ns := fmt.Sprintf("ns%d", i)
			efs = append(efs, &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}})
			if i < backlog {
				objects[fw(ns)] = nil
			}
		}
		// The API server's time, not the fake client's (which holds a lock over its reactors).
		var mu sync.Mutex
		var order []string
		writeEntry := entryWriters[cluster.KindEgressFirewall]
		t.Cleanup(func() { entryWriters[cluster.KindEgressFirewall] = writeEntry })
		entryWriters[cluster.KindEgressFirewall] = func(_ context.Context, _ *Writer, o dataplane.Origin, _ error, _ string) (bool, error) {
			time.Sleep(100 * time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			order = append(order, o.Namespace)
			return true, nil
		}
		m := NewMetrics()
		w := &Writer{Node: "n1", Snapshot: watcherstest.Snapshot(efs...), Metrics: m, Log: slog.New(slog.DiscardHandler)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go w.Run(ctx)
		w.Report(cluster.NewOutcomes(cluster.NewShared(objects)), nil, dataplane.Result{})
		time.Sleep(time.Second) // 8 writes at a time: some 80 written
		synctest.Wait()
		if p := testutil.ToFloat64(m.pending); p < backlog-100 || p > backlog-50 {
			t.Errorf("%v entries pending a second into the backlog, want some 920", p)
		}
		created := maps.Clone(objects)
		created[fw(fmt.Sprintf("ns%d", backlog))] = nil
		w.Report(cluster.NewOutcomes(cluster.NewShared(created)), nil, dataplane.Result{})
		time.Sleep(time.Minute)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		at := slices.Index(order, fmt.Sprintf("ns%d", backlog))
		if len(order) != backlog+1 || at < 0 || at > 100 {
			t.Fatalf("%d entries written, the new firewall's %dth; want %d, it among the first 100", len(order), at+1, backlog+1)
		}
		if p, n := testutil.ToFloat64(m.pending), testutil.ToFloat64(m.writes.WithLabelValues("written")); p != 0 || n != backlog+1 {
			t.Errorf("metrics at the end: %v pending, %v written; want 0, %d", p, n, backlog+1)
		}
	})
}
