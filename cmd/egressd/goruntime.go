package main

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// gcPercent is the collector's target for a large heap when GOGC is unset: a collection once
// the heap has grown 40% over what the last one left live, not Go's default 100%. egressd runs
// on every node, where its memory is taken from the node's workloads and its steady CPU is
// small (0.6% of a core at 150,000 pods, docs/scale.md); Calico's Felix makes the same trade
// (goGCThreshold, 40).
const gcPercent = 40

// agentHeadroom is the least an agent's heap grows between collections, up to Go's default of
// 100%. An agent on a node with a few hundred pods holds a small heap, and at 40% of it a
// collection came every few syncs: its marking slowed the sync a pod's CNI ADD waits for (200
// ADDs one at a time: 169 to 178 answered within 5 ms at 40%, 189 at 100%). 40% costs that
// only where it saves more than agentHeadroom. The controller answers no ADD and keeps 40%
// throughout (at full size it held 130 MB so, 153 MB with this headroom).
const agentHeadroom = 32 << 20

// tuneGC keeps the collector's target at gcTarget of the live heap with the given headroom
// (none: gcPercent throughout) until ctx ends, unless GOGC says otherwise, and logs what the
// collector runs with.
func tuneGC(ctx context.Context, log *slog.Logger, headroom uint64) {
	if v, ok := os.LookupEnv("GOGC"); ok {
		log.Info("garbage collector target from GOGC", "GOGC", v)
		return
	}
	if headroom == 0 {
		debug.SetGCPercent(gcPercent)
		log.Info("garbage collector target", "percent", gcPercent)
		return
	}
	t := &gcTuner{ctx: ctx, headroom: headroom, set: debug.SetGCPercent, live: liveHeap}
	t.adjust()
	t.arm()
	log.Info("garbage collector target", "percent", gcPercent, "minHeadroomMiB", headroom>>20)
}

// gcTarget is the collector's target percent for a live heap of live bytes: gcPercent, or
// more where that leaves less than headroom, up to 100.
func gcTarget(live, headroom uint64) int {
	if live == 0 {
		return 100
	}
	return int(max(gcPercent, min(100, headroom*100/live)))
}

// gcTuner sets the collector's target after each collection, from the heap it left live.
type gcTuner struct {
	ctx      context.Context // the tuner stops once it ends
	headroom uint64
	set      func(int) int
	live     func() uint64
	percent  int // the target last set (0: none yet)
}

func (t *gcTuner) adjust() {
	if p := gcTarget(t.live(), t.headroom); p != t.percent {
		t.set(p)
		t.percent = p
	}
}

// gcSentinel is found unreachable by the collection after it is made: its finalizer then runs
// the tuner, and makes the next one. It holds a pointer, so that it is not one of the tiny
// allocations the runtime packs together and frees late.
type gcSentinel struct{ t *gcTuner }

// arm adjusts the target after the next collection, and after every one after it, until the
// tuner's context ends.
func (t *gcTuner) arm() {
	runtime.SetFinalizer(&gcSentinel{t}, func(s *gcSentinel) {
		if s.t.ctx.Err() != nil {
			return
		}
		s.t.adjust()
		s.t.arm()
	})
}

// liveHeap is the heap the last collection left live, in bytes.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
