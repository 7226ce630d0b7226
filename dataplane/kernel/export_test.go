package kernel

import (
	"time"

	"github.com/egressd/egressd/dataplane"
)

// SetEventBuffer sets the receive buffer of the event sockets that appliers subscribe from now
// on; restore sets it back.
func SetEventBuffer(bytes int) (restore func()) {
	old := eventBuffer
	eventBuffer = bytes
	return func() { eventBuffer = old }
}

// SetTableCheck sets how often appliers made from now on look at their nftables table.
func SetTableCheck(every time.Duration) (restore func()) {
	old := tableCheck
	tableCheck = every
	return func() { tableCheck = old }
}

// FailRemovals makes facility's removals fail with err in the Applies that follow, as a kernel
// that refuses them would; restore puts the facility's own back.
func (d *Applier) FailRemovals(facility string, err error) (restore func()) {
	for i, r := range d.removals {
		if r.facility == facility {
			d.removals[i].prune = func(*dataplane.State, *dataplane.RoutingState) error { return err }
			return func() { d.removals[i].prune = r.prune }
		}
	}
	panic("no removals of " + facility)
}
