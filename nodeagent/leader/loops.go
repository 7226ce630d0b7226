package leader

import (
	"context"
	"net/netip"
	"sync"
	"time"
)

// Reachability is the leader's view of which nodes' agents answer their health probes.
type Reachability interface {
	// Set replaces the probed nodes and their health endpoints.
	Set(targets map[string]netip.AddrPort)
	Reachable(node string) bool
	// Changed signals a node becoming reachable or unreachable.
	Changed() <-chan struct{}
}

// ReconcileLoop is the loop of a leader's controller that probes nodes (EgressIP, EgressService,
// EgressRouter): reconcile after every API change, probe verdict and period, until ctx ends,
// at once again when reconcile says so. Probing is the leader's: the probes stop when it
// returns.
func ReconcileLoop(ctx context.Context, period time.Duration, changed <-chan struct{}, probes Reachability, reconcile func(context.Context) bool) {
	defer probes.Set(nil)
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		if reconcile(ctx) {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-changed:
		case <-probes.Changed():
		}
	}
}

// Isolated reports whether probes find none of the nodes of targets reachable but self (the
// controller's own node, which answers it whatever its network), of two or more others: a
// single probed node's silence cannot tell its failure from the controller's, and is taken for
// the node's, as before there was this check. A replica back from a cut is isolated until its
// probes find the others again: it moves nothing on the verdicts of its cut.
func Isolated(targets map[string]netip.AddrPort, self string, probes Reachability) bool {
	others := 0
	for n := range targets {
		if n == self {
			continue
		}
		others++
		if probes.Reachable(n) {
			return false
		}
	}
	return others > 1
}

// StandbyLoop runs setTargets after every change and every second until ctx ends: the leader's
// ReconcileLoop clears the probes when its term ends, and the standby sets them again.
func StandbyLoop(ctx context.Context, changed <-chan struct{}, setTargets func()) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		setTargets()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-changed:
		}
	}
}

// ConcurrentWrites bounds the objects a leader writes at once. Moving a failed node's egress
// IPs or EgressService hosts is a write per object (a read and a patch or update): one at a
// time, the last of 100 waited for the 99 before it (about 100 s on an API server answering in
// 0.5 s). The client's rate limit still bounds the rate.
const ConcurrentWrites = 16

// Writes runs write(i) for each i below n, at most ConcurrentWrites at once, and returns once
// all have. The writes must be independent: each of another object.
func Writes(n int, write func(i int)) {
	slots := make(chan struct{}, ConcurrentWrites)
	var wg sync.WaitGroup
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			write(i)
		})
	}
	wg.Wait()
}
