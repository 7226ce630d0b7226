package nft

import (
	"maps"
	"slices"
	"time"

	"github.com/egressd/egressd/dataplane"
)

// ACL logging of the drops after DNAT. The judgement is nftables' (fw_service_backends), so
// the classifier's ring buffer never sees these packets. Rather than a log statement (the
// kernel log, or NFLOG and a netlink listener, per packet, with a rate limit that nft can only
// share by rule or keep per element), the agent reads the per-element counters the table
// already keeps for metrics: an element is one pod, backend, protocol and port denied by one
// EgressFirewall rule, which is all an ACL log line names but the source port. Each packet the
// counter gained is a line, within the rule's own rate limit (a bucket per rule, as OVN's fair
// meter), at most one reading late (ServeACLLog's interval).

// dropLog is what was logged of each element's counter.
type dropLog struct {
	// seen are the packets of each logged element already accounted for, by element key; an
	// element that logs without an entry gets its reading as a baseline (its logging just
	// started), one that does not log has none.
	seen    map[string]uint64
	buckets map[dataplane.Origin]*bucket
}

func newDropLog() dropLog {
	return dropLog{seen: map[string]uint64{}, buckets: map[dataplane.Origin]*bucket{}}
}

// track follows an Apply that wrote denies over prev: elements it created (every one when it
// wrote the table whole) count from 0; removed ones are forgotten.
func (l *dropLog) track(prev, denies map[string]dataplane.BackendDeny, rewrite bool) {
	seen := map[string]uint64{}
	for k, d := range denies {
		_, kept := prev[k]
		if n, ok := l.seen[k]; ok && kept && !rewrite {
			seen[k] = n
		} else if (!kept || rewrite) && d.Log != "" {
			seen[k] = 0
		}
	}
	l.seen = seen
	rules := map[dataplane.Origin]bool{}
	for _, d := range denies {
		rules[d.Origin] = true
	}
	maps.DeleteFunc(l.buckets, func(o dataplane.Origin, _ *bucket) bool { return !rules[o] })
}

// bucket is a token bucket of rate lines per second, with bursts of as many.
type bucket struct {
	tokens float64
	at     time.Time
}

func (b *bucket) take(now time.Time, rate uint32) bool {
	b.tokens = min(float64(rate), b.tokens+now.Sub(b.at).Seconds()*float64(rate))
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// ServeACLLog writes an ACL log line (verdict drop, the namespace's deny severity) to w for
// each packet a backend deny of a namespace that asks for logging dropped, at most rate per
// second and rule (0 logs none), reading the counters every interval until stop is closed.
func (t *Table) ServeACLLog(w *dataplane.ACLLogWriter, rate uint32, interval time.Duration, stop <-chan struct{}) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			t.logDrops(w, rate, time.Now())
		}
	}
}

func (t *Table) logDrops(w *dataplane.ACLLogWriter, rate uint32, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.drops.logging(t.denies) {
		return // no reading of the kernel's counters
	}
	t.drops.log(t.denies, t.elementCounters(backendDeny4Set, backendDeny6Set), w, rate, now)
}

// logging says whether some element logs its drops; those that do not lose their reading (a
// baseline again if they log later).
func (l *dropLog) logging(denies map[string]dataplane.BackendDeny) bool {
	logging := false
	for k, d := range denies {
		if d.Log == "" {
			delete(l.seen, k)
		} else {
			logging = true
		}
	}
	return logging
}

// log writes a line per packet the counters read gained since the last reading, within each
// rule's bucket.
func (l *dropLog) log(denies map[string]dataplane.BackendDeny, read map[string]Counters, w *dataplane.ACLLogWriter, rate uint32, now time.Time) {
	for _, k := range slices.Sorted(maps.Keys(denies)) {
		d, c := denies[k], read[k]
		if d.Log == "" {
			continue
		}
		seen, known := l.seen[k]
		l.seen[k] = c.Packets
		if !known || rate == 0 {
			continue
		}
		if c.Packets < seen { // the counter restarted
			seen = 0
		}
		b := l.buckets[d.Origin]
		if b == nil {
			b = &bucket{tokens: float64(rate), at: now}
			l.buckets[d.Origin] = b
		}
		for range c.Packets - seen {
			if !b.take(now, rate) {
				break
			}
			w.Write(dataplane.ACLLogEntry{
				Name: dataplane.ACLName(d.Origin.Namespace, d.Origin.Rule), Verdict: "drop", Severity: d.Log,
				Proto: d.Protocol, Src: d.Pod, Dst: d.Backend, DstPort: d.Port,
			})
		}
	}
}
