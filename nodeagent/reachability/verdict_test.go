package reachability

import (
	"testing"
	"time"
)

// step is one input of a verdict scenario: an outcome at a time offset, and the
// reachability expected right after it.
type step struct {
	at   time.Duration
	o    outcome
	want bool
}

func TestVerdict(t *testing.T) {
	const ms = time.Millisecond
	grace := 30 * time.Second
	cases := []struct {
		name    string
		steps   []step
		wantWhy reason
	}{
		{"three silent connects in a row: unreachable at the third", []step{
			{150 * ms, silent, true}, {300 * ms, silent, true}, {450 * ms, silent, false},
		}, hostSilent},
		{"an answer between misses resets the count", []step{
			{150 * ms, silent, true}, {300 * ms, silent, true}, {450 * ms, answered, true},
			{600 * ms, silent, true}, {750 * ms, silent, true}, {900 * ms, answered, true},
		}, ""},
		{"refused is an answer: the agent restarts, the host is alive", []step{
			{150 * ms, silent, true}, {300 * ms, silent, true}, {450 * ms, refused, true},
			{10 * time.Second, refused, true}, {29 * time.Second, refused, true},
		}, ""},
		{"refused past the grace without SERVING: unreachable", []step{
			{time.Second, refused, true}, {29 * time.Second, refused, true},
			{30*time.Second + ms, refused, false},
		}, agentAbsent},
		{"SERVING renews the grace", []step{
			{20 * time.Second, serving, true}, {49 * time.Second, refused, true},
			{50*time.Second + ms, refused, false},
		}, agentAbsent},
		{"health failures alone (saturated agent) are tolerated for the grace", []step{
			{0, serving, true}, {time.Second, notServing, true}, {10 * time.Second, notServing, true},
			{10 * time.Second, answered, true}, {20 * time.Second, serving, true},
		}, ""},
		{"failed Checks are not misses: only silent connects are", []step{
			{time.Second, notServing, true}, {2 * time.Second, notServing, true}, {3 * time.Second, notServing, true},
			{4 * time.Second, notServing, true}, {5 * time.Second, notServing, true},
		}, ""},
		{"local errors count neither way", []step{
			{150 * ms, silent, true}, {300 * ms, silent, true}, {450 * ms, localError, true},
			{600 * ms, localError, true}, {750 * ms, silent, false},
		}, hostSilent},
		{"back after host death: needs Misses answers and a fresh SERVING", []step{
			{0, serving, true}, {150 * ms, silent, true}, {300 * ms, silent, true}, {450 * ms, silent, false},
			{5 * time.Second, refused, false}, {5100 * ms, refused, false}, {5200 * ms, refused, false},
			{6 * time.Second, serving, true},
		}, ""},
		{"a SERVING while answers are too few does not bring it back yet", []step{
			{150 * ms, silent, true}, {300 * ms, silent, true}, {450 * ms, silent, false},
			{time.Second, answered, false}, {1100 * ms, serving, false}, {1200 * ms, answered, false},
			{1300 * ms, answered, true},
		}, ""},
		{"a silent connect during recovery starts the count again", []step{
			{150 * ms, silent, true}, {300 * ms, silent, true}, {450 * ms, silent, false},
			{time.Second, serving, false}, {time.Second, answered, false}, {1100 * ms, answered, false},
			{1200 * ms, silent, false}, {1300 * ms, answered, false}, {1400 * ms, answered, false},
			{1500 * ms, answered, true},
		}, ""},
		{"back after agent absence: SERVING again", []step{
			{31 * time.Second, answered, false}, {31100 * ms, answered, false}, {31200 * ms, answered, false},
			{32 * time.Second, serving, true},
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t0 := time.Unix(1000, 0)
			v := newVerdict(3, grace, t0)
			for i, s := range c.steps {
				before := v.reachable
				changed := v.record(t0.Add(s.at), s.o)
				if v.reachable != s.want {
					t.Fatalf("step %d (%v at %v): reachable=%v, want %v", i, s.o, s.at, v.reachable, s.want)
				}
				if changed != (before != s.want) {
					t.Fatalf("step %d: changed=%v while reachable went %v -> %v", i, changed, before, s.want)
				}
			}
			if v.why != c.wantWhy {
				t.Errorf("reason %q, want %q", v.why, c.wantWhy)
			}
		})
	}
}
