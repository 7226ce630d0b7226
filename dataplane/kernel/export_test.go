package kernel

import (
	"time"
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
	for i, f := range d.facilities {
		if pr, ok := f.(pruner); ok && pr.name() == facility {
			d.facilities[i] = refusing{pr, err}
			return func() { d.facilities[i] = f }
		}
	}
	panic("no removals of " + facility)
}

// refusing is a pruner whose removals fail.
type refusing struct {
	pruner
	err error
}

func (r refusing) prune(*pass) error { return r.err }
