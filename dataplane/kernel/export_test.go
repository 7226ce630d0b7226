package kernel

import "time"

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
