package dataplane

import "net/netip"

// Address is an egress address this node hosts: added with host prefix length (/32, /128
// without DAD) to the interface whose network contains it, and announced with gratuitous ARP or
// an unsolicited neighbour advertisement whenever it is added.
type Address struct {
	Origin Origin
	Addr   netip.Addr
	// Interface is the interface to add it to; empty means the one whose network contains it.
	Interface string
}
