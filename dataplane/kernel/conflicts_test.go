package kernel

import (
	"slices"
	"testing"
	"time"
)

// A newly attached interface is looked at by the periodic look once for each entry of
// podLooks, not at every look: with the looks 5 s apart from 2 s after the attach, at 2, 17,
// 32 and 62 s, then never again; a look delayed past several entries counts once.
func TestSettleLooksAtEachEntryOnce(t *testing.T) {
	attach := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name  string
		looks []time.Duration // ages of the periodic looks
		want  []time.Duration // those that look at the interface
	}{
		{"every 5 s", seq(2*time.Second, 5*time.Second, 90*time.Second),
			[]time.Duration{2 * time.Second, 17 * time.Second, 32 * time.Second, 62 * time.Second}},
		{"delayed past three entries", []time.Duration{time.Second, 40 * time.Second, 50 * time.Second, 61 * time.Second, 70 * time.Second},
			[]time.Duration{time.Second, 40 * time.Second, 61 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &settle{at: attach}
			var got []time.Duration
			for _, age := range tc.looks {
				if s.done() {
					break
				}
				if s.due(attach.Add(age)) {
					got = append(got, age)
				}
			}
			if !s.done() {
				t.Errorf("still settling after the looks at %v", tc.looks)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("looked at %v, want %v", got, tc.want)
			}
		})
	}
}

func seq(from, step, to time.Duration) []time.Duration {
	var out []time.Duration
	for d := from; d <= to; d += step {
		out = append(out, d)
	}
	return out
}
