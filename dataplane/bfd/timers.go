package bfd

import (
	"container/heap"
	"time"
)

// fire handles every session whose time has come.
func (m *Manager) fire(now time.Time) {
	for len(m.timers) > 0 && !m.timers[0].next().After(now) {
		e := m.timers[0]
		if !e.removeAt.IsZero() && !now.Before(e.removeAt) {
			m.delete(e)
			continue
		}
		tr := e.expire(now)
		if tr == nil && e.shouldSendPeriodic(now) {
			m.send(e, false)
		}
		m.afterChange(e, tr, now)
	}
}

// afterChange publishes a transition, sends the packet announcing it, and re-sorts the heap.
func (m *Manager) afterChange(e *entry, tr *Transition, now time.Time) {
	if tr != nil {
		m.log.Info("bfd session state changed", "peer", e.key.String(), "from", tr.From.String(), "to", tr.To.String(),
			"diag", tr.Diag.String(), "remoteDiag", tr.RemoteDiag.String())
		for ch := range m.subs {
			select {
			case ch <- *tr:
			default:
				m.log.Warn("bfd subscriber is not keeping up; Sessions() has the current state", "peer", e.key.String())
			}
		}
		if e.shouldSendPeriodic(now) {
			m.send(e, false)
		}
	}
	if e.index >= 0 {
		heap.Fix(&m.timers, e.index)
	}
}

func (m *Manager) untilNext() time.Duration {
	if len(m.timers) == 0 {
		return time.Hour
	}
	return max(time.Until(m.timers[0].next()), 0)
}

// timerHeap orders sessions by the time they next need attention.
type timerHeap []*entry

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].next().Before(h[j].next()) }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *timerHeap) Push(x any)        { e := x.(*entry); e.index = len(*h); *h = append(*h, e) }
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	e.index = -1
	return e
}
