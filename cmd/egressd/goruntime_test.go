package main

import (
	"log/slog"
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	log := slog.New(slog.DiscardHandler)
	tuneGC(log)
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("GOGC unset: collector target %d%%, want %d%%", got, gcPercent)
	}
	t.Setenv("GOGC", "100") // the runtime read it at start; tuneGC must leave it alone
	debug.SetGCPercent(100)
	tuneGC(log)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC=100: collector target %d%%, want it left at 100%%", got)
	}
}
