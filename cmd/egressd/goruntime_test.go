package main

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"
)

func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	log := slog.New(slog.DiscardHandler)
	debug.SetGCPercent(77)
	tuneGC(t.Context(), log, 0)
	if got := debug.SetGCPercent(77); got != gcPercent {
		t.Errorf("GOGC unset, no headroom (the controller): collector target %d%%, want %d%%", got, gcPercent)
	}
	ctx, cancel := context.WithCancel(t.Context())
	tuneGC(ctx, log, agentHeadroom)
	cancel() // its later adjustments would move the target under the tests that follow
	if got, want := debug.SetGCPercent(100), gcTarget(liveHeap(), agentHeadroom); got != want {
		t.Errorf("GOGC unset, the agent's headroom: collector target %d%%, want %d%%", got, want)
	}
	t.Setenv("GOGC", "100") // the runtime read it at start; tuneGC must leave it alone
	debug.SetGCPercent(100)
	tuneGC(t.Context(), log, agentHeadroom)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC=100: collector target %d%%, want it left at 100%%", got)
	}
}

func TestGCTarget(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 100},                       // nothing measured yet
		{8 << 20, 100},                 // a small heap: Go's default, 8 MiB more
		{agentHeadroom, 100},           // 100% is the headroom
		{64 << 20, 50},                 // the headroom is half
		{agentHeadroom * 100 / 40, 40}, // from here on, 40%
		{1 << 30, gcPercent},           // the full-size cluster's egress node: 40%
	} {
		if got := gcTarget(c.live, agentHeadroom); got != c.want {
			t.Errorf("live heap %d MiB: target %d%%, want %d%%", c.live>>20, got, c.want)
		}
	}
}

// TestGCTunerFollowsEachCollection: the tuner sets the target after a collection, from the
// heap it left, and again after the next.
func TestGCTunerFollowsEachCollection(t *testing.T) {
	set := make(chan int, 16)
	var live atomic.Uint64
	live.Store(1 << 30)
	// The tuner's last sentinel outlives the test, and may run once more as it ends: it must
	// never block.
	send := func(p int) int {
		select {
		case set <- p:
		default:
		}
		return 0
	}
	tuner := &gcTuner{ctx: t.Context(), headroom: agentHeadroom, set: send, live: live.Load}
	tuner.arm()
	collect := func(want int) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			runtime.GC()
			select {
			case got := <-set:
				if got != want {
					t.Fatalf("target set to %d%%, want %d%%", got, want)
				}
				return
			case <-deadline:
				t.Fatalf("no target set after collections (want %d%%)", want)
			default:
				runtime.Gosched() // the finalizer runs on its own goroutine
			}
		}
	}
	collect(gcPercent)
	live.Store(8 << 20) // the heap shrank
	collect(100)
}
