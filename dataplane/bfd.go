package dataplane

import (
	"net/netip"
	"time"
)

// BFDPeer is a BFD session (RFC 5880/5881, single hop) to a next hop.
type BFDPeer struct {
	Origin    Origin
	Peer      netip.Addr
	Interface string
	// MinTx, MinRx and Multiplier are the timers; zero means egressd's defaults.
	MinTx, MinRx time.Duration
	Multiplier   uint8
}
