package poll

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	n := 0
	start := time.Now()
	err := Until(context.Background(), "third try", time.Second, func() error {
		if n++; n < 3 {
			return fmt.Errorf("try %d", n)
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("err %v after %d tries", err, n)
	}
	if d := time.Since(start); d > 10*Interval {
		t.Errorf("3 tries took %s", d)
	}

	last := errors.New("still 2 programs on lv0")
	err = Until(context.Background(), "one program", 200*time.Millisecond, func() error { return last })
	if !errors.Is(err, last) || !strings.Contains(err.Error(), "one program: not true after 200ms: still 2 programs on lv0") {
		t.Errorf("timeout error %q", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Until(ctx, "x", time.Hour, func() error { return last }); !errors.Is(err, last) {
		t.Errorf("cancelled: %v", err)
	}
}
