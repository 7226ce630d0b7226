package nodeagent

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane"
)

type countingApplier struct{ n atomic.Int32 }

func (c *countingApplier) Apply(context.Context, *dataplane.State) dataplane.Result {
	c.n.Add(1)
	return dataplane.Result{}
}

// A burst of changes inside the debounce window costs one sync, after the initial one.
func TestSyncLoopDebouncesBursts(t *testing.T) {
	changed := make(chan struct{}, 1)
	app := &countingApplier{}
	l := &SyncLoop{
		Node: "n", Changed: changed, Applier: app, Metrics: NewMetrics(),
		Snapshot: snapshotOf(), DNS: noNames{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Debounce: 50 * time.Millisecond, Resync: time.Hour,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	deadline := time.Now().Add(2 * time.Second)
	for !l.Synced() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !l.Synced() || app.n.Load() != 1 {
		t.Fatalf("after start: synced=%v applies=%d", l.Synced(), app.n.Load())
	}
	for range 20 { // like an informer: a full channel means a sync is already pending
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	time.Sleep(200 * time.Millisecond)
	if n := app.n.Load(); n < 2 || n > 3 {
		t.Errorf("a burst of 20 changes caused %d syncs after the first, want 1 (2 at most)", n-1)
	}
	cancel()
	<-done
}

// noNames is a resolver that knows no name.
type noNames struct{}

func (noNames) Want([]string)              {}
func (noNames) Lookup(string) []netip.Addr { return nil }
func (noNames) Changed() <-chan struct{}   { return nil }
