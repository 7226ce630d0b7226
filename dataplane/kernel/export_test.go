package kernel

// SetEventBuffer sets the receive buffer of the event sockets that appliers subscribe from now
// on; restore sets it back.
func SetEventBuffer(bytes int) (restore func()) {
	old := eventBuffer
	eventBuffer = bytes
	return func() { eventBuffer = old }
}
