package nodeagent

import "time"

// Bounds of the retry of a failed apply.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 30 * time.Second
)

// backoff schedules the retry of a failed apply, doubling the delay after each failure in a
// row: a transient kernel error is repaired at once instead of at the next event or resync,
// and a persistent one does not spin.
type backoff struct {
	delay time.Duration
	timer *time.Timer
}

func (b *backoff) failed() {
	b.delay = min(max(2*b.delay, retryFirst), retryMax)
	if b.timer == nil {
		b.timer = time.NewTimer(b.delay)
		return
	}
	b.timer.Reset(b.delay)
}

func (b *backoff) reset() {
	b.delay = 0
	if b.timer != nil {
		b.timer.Stop()
	}
}

// after fires when a retry is due; nil (never) when none is scheduled.
func (b *backoff) after() <-chan time.Time {
	if b.timer == nil || b.delay == 0 {
		return nil
	}
	return b.timer.C
}
