package main

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// gcPercent is the collector's target when GOGC is unset: a collection once the heap has grown
// 40% over what the last one left live, not Go's default 100%. egressd runs on every node, where
// its memory is taken from the node's workloads and its steady CPU is small (0.6% of a core at
// 150,000 pods, docs/scale.md); Calico's Felix makes the same trade (goGCThreshold, 40).
const gcPercent = 40

// tuneGC sets gcPercent unless GOGC says otherwise, and logs what the collector runs with.
func tuneGC(log *slog.Logger) {
	if v, ok := os.LookupEnv("GOGC"); ok {
		log.Info("garbage collector target from GOGC", "GOGC", v)
		return
	}
	debug.SetGCPercent(gcPercent)
	log.Info("garbage collector target", "percent", gcPercent)
}
