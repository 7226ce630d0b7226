// Package poll is how tests wait for something to become true: a condition returning an error
// (nil once satisfied) is tried every Interval until a timeout, and on timeout the failure says
// what was awaited and the condition's last error, i.e. what was still wrong.
//
// Sleeping a fixed time instead, to let something happen, makes a test slow when the wait is
// long and flaky when it is short: wait for an observable with Eventually instead.
package poll

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Interval between two tries of a condition.
const Interval = 50 * time.Millisecond

// Until tries cond until it returns nil, timeout passes or ctx ends. The error names what was
// awaited (what) and wraps cond's last error.
func Until(ctx context.Context, what string, timeout time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if err := cond(); err == nil { // the deadline may have passed during the last try
				return nil
			}
			return fmt.Errorf("%s: not true after %s: %w", what, timeout, err)
		case <-tick.C:
		}
	}
}

// Eventually fails t (t.Fatal) unless cond returns nil within timeout; see Until.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Until(context.Background(), what, timeout, cond); err != nil {
		t.Fatal(err)
	}
}
