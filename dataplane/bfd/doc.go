// Package bfd is egressd's Bidirectional Forwarding Detection: RFC 5880 asynchronous mode over
// RFC 5881 single-hop UDP, for IPv4 and IPv6, used to stop routing through an external gateway as
// soon as it dies. It has no Kubernetes dependency.
//
// What it implements: the full session state machine (AdminDown, Down, Init, Up) of RFC 5880
// section 6.8.6, discriminators and demultiplexing by Your Discriminator (by addresses while it
// is zero), the detect multiplier, negotiation of Desired Min TX / Required Min RX, the slow
// rate of at least one second while a session is not Up, Poll/Final sequences when timers
// change (ours or the peer's), transmit jitter (section 6.8.7), diagnostic codes, and a remote
// AdminDown treated as the RFC says (Down, diag "Neighbor Signaled Session Down"). Packets are
// sent with TTL / hop limit 255 from a source port in 49152-65535 that is unique per session,
// and received packets with any other TTL are dropped (GTSM, RFC 5881 section 5).
//
// What it does not implement: authentication (packets with the A bit are discarded, as the RFC
// requires when no authentication is configured), the echo function (Required Min Echo RX is
// always 0) and demand mode (never requested; a peer's demand mode is honoured by not sending
// periodic packets while both sides are Up).
//
// Sessions live in one Manager: two receive sockets (UDP 3784, v4 and v6) shared by all
// sessions, one small send socket per session, and a single event loop with a timer heap, so that
// hundreds of sessions cost no goroutine each and no goroutine per packet. The set of sessions
// is level-triggered like the rest of the dataplane: Manager.Sync takes the complete desired list
// and adds, updates in place, recreates or removes sessions to match it.
package bfd
