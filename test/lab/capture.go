package lab

import (
	"sync"
	"time"
)

// Captured is one TCP, UDP or SCTP packet an external host's link received.
type Captured struct {
	At time.Time
	// ForHost is true for packets addressed to the host's MAC (or broadcast); false for frames
	// to another MAC that the fabric flooded to it (the host's stack drops them).
	ForHost bool
	Observation
}

// Capture records every TCP, UDP and SCTP packet an external host's link receives while it
// runs (its source address and MAC included), for counts and timings.
type Capture struct {
	mu      sync.Mutex
	cond    *sync.Cond
	packets []Captured
	stop    func()
}

// Capture starts recording the packets the host receives; Stop ends it.
func (e *External) Capture() *Capture {
	c := &Capture{}
	c.cond = sync.NewCond(&c.mu)
	o := e.obs
	o.mu.Lock()
	if o.taps == nil {
		o.taps = map[*Capture]bool{}
	}
	o.taps[c] = true
	o.mu.Unlock()
	c.stop = func() {
		o.mu.Lock()
		delete(o.taps, c)
		o.mu.Unlock()
	}
	return c
}

func (c *Capture) add(p Captured) {
	c.mu.Lock()
	c.packets = append(c.packets, p)
	c.cond.Broadcast()
	c.mu.Unlock()
}

// Stop ends the recording; what was recorded stays readable.
func (c *Capture) Stop() { c.stop() }

// Packets returns what was recorded so far, in order of arrival.
func (c *Capture) Packets() []Captured {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Captured(nil), c.packets...)
}

// Count is the number of recorded packets that match.
func (c *Capture) Count(match func(Captured) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.packets {
		if match(p) {
			n++
		}
	}
	return n
}

// Await waits up to timeout for a packet that arrived at or after since and matches, and
// returns the first such.
func (c *Capture) Await(since time.Time, timeout time.Duration, match func(Captured) bool) (Captured, bool) {
	deadline := time.Now().Add(timeout)
	c.mu.Lock()
	defer c.mu.Unlock()
	i := 0
	for {
		for ; i < len(c.packets); i++ {
			if p := c.packets[i]; !p.At.Before(since) && match(p) {
				return p, true
			}
		}
		if time.Now().After(deadline) {
			return Captured{}, false
		}
		t := time.AfterFunc(50*time.Millisecond, func() { c.mu.Lock(); c.cond.Broadcast(); c.mu.Unlock() })
		c.cond.Wait()
		t.Stop()
	}
}
