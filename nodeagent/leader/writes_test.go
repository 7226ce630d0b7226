package leader

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Writes runs every write, ConcurrentWrites at once and never more: on the bubble's fake
// clock each write takes a second, so 40 take 3 s, not 40 s.
func TestWritesConcurrently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		inFlight, most := 0, 0
		done := make([]bool, 40)
		start := time.Now()
		Writes(len(done), func(i int) {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			mu.Unlock()
			time.Sleep(time.Second)
			mu.Lock()
			inFlight--
			done[i] = true
			mu.Unlock()
		})
		for i, ok := range done {
			if !ok {
				t.Errorf("write %d did not run", i)
			}
		}
		if most != ConcurrentWrites {
			t.Errorf("%d writes in flight at most, want %d", most, ConcurrentWrites)
		}
		if took := time.Since(start); took != 3*time.Second {
			t.Errorf("40 writes of 1 s took %s, want 3s", took)
		}
	})
}
