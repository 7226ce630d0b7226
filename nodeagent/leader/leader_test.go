package leader

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// fakeLock is a Lease held by holder; Update records what was written.
type fakeLock struct {
	resourcelock.Interface
	holder  string
	written []resourcelock.LeaderElectionRecord
}

func (f *fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return &resourcelock.LeaderElectionRecord{HolderIdentity: f.holder}, nil, nil
}

func (f *fakeLock) Update(_ context.Context, rec resourcelock.LeaderElectionRecord) error {
	f.written = append(f.written, rec)
	return nil
}

func (f *fakeLock) Identity() string { return "node-a" }

// A release (empty holder) stops the term's controllers first, and is written only while the
// Lease still names this replica; renewals are never held back nor stop anything.
func TestReleaseGuard(t *testing.T) {
	ctx := context.Background()
	stopped := 0
	stop := func() { stopped++ }
	taken := &fakeLock{holder: "node-b"}
	if err := (lockGuard{taken, stop, nil}).Update(ctx, resourcelock.LeaderElectionRecord{}); err == nil || len(taken.written) != 0 || stopped != 1 {
		t.Errorf("released a Lease node-b holds: err %v, written %v, controllers stopped %d times", err, taken.written, stopped)
	}
	if err := (lockGuard{taken, stop, nil}).Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "node-a"}); err != nil || len(taken.written) != 1 || stopped != 1 {
		t.Errorf("an update naming us was held back (%v) or stopped the controllers (%d)", err, stopped)
	}
	ours := &fakeLock{holder: "node-a"}
	if err := (lockGuard{ours, stop, nil}).Update(ctx, resourcelock.LeaderElectionRecord{}); err != nil || len(ours.written) != 1 || stopped != 2 {
		t.Errorf("did not release our own Lease: err %v, written %v", err, ours.written)
	}
}

// The term's controllers are stopped, and have returned, before a release goes out.
func TestStopTermWaitsForTheControllers(t *testing.T) {
	var returned atomic.Bool
	controller := func(ctx context.Context) {
		<-ctx.Done()
		returned.Store(true)
	}
	e := &LeaderElection{Controllers: []Controller{controller}, Metrics: NewMetrics(), Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background()) // client-go's, not cancelled until the release returned
	defer cancel()
	done := make(chan struct{})
	go func() { e.lead(ctx); close(done) }()
	for {
		e.termMu.Lock()
		started := e.endTerm != nil
		e.termMu.Unlock()
		if started {
			break
		}
		runtime.Gosched()
	}
	e.stopTerm()
	if !returned.Load() {
		t.Fatal("stopTerm returned before the controller did")
	}
	<-done
}

// A term's controllers start only once the last term's have returned: a Lease lost and taken
// again never runs one controller twice at once. In a bubble: once all is quiescent, the second
// term has had every chance to start its controller while the first's is slow to stop.
func TestLeadWaitsForTheLastTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var running, most atomic.Int32
		stopping := make(chan struct{})
		controller := func(ctx context.Context) {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			<-ctx.Done()
			<-stopping // slow to stop
			running.Add(-1)
		}
		e := &LeaderElection{Controllers: []Controller{controller}, Metrics: NewMetrics(), Log: slog.New(slog.DiscardHandler)}
		first, endFirst := context.WithCancel(t.Context())
		second, endSecond := context.WithCancel(t.Context())
		defer endSecond()
		var wg sync.WaitGroup
		wg.Go(func() { e.lead(first) })
		synctest.Wait()
		if running.Load() != 1 {
			t.Errorf("%d controllers running in the first term, want 1", running.Load())
		}
		endFirst() // the Lease lost; the controller takes its time to stop
		wg.Go(func() { e.lead(second) })
		synctest.Wait() // the second term's lead has done all it could before the first's returned
		if m := most.Load(); m != 1 {
			t.Errorf("%d controllers ran at once while the first term's was stopping, want 1", m)
		}
		close(stopping)
		synctest.Wait()
		if running.Load() != 1 { // the second term's controller
			t.Errorf("%d controllers running once the first term's returned, want 1 (the second term's)", running.Load())
		}
		endSecond()
		wg.Wait()
		if m := most.Load(); m != 1 {
			t.Errorf("%d controllers ran at once, want 1", m)
		}
	})
}
