package dataplane

import (
	"fmt"
	"math/bits"
)

// markOwners are the skb->mark bits that components egressd runs beside set by default: a
// steered packet whose steering bits one of them rewrites, or whose bits it reads as its own,
// loses its path or takes theirs.
var markOwners = []struct {
	bits  uint32
	owner string
}{
	{0x4000, "kube-proxy's masquerade mark (--iptables-masquerade-bit 14)"},
	{0x8000, "kube-proxy's drop mark (iptables mode)"},
	{0x0f00, "Cilium's magic marks (MARK_MAGIC_*, its proxy and host traffic)"},
}

// CheckMarkMask tells why mask cannot hold egressd's steering marks, if it cannot: the marks
// are numbers shifted into it, so it is one run of bits, and it stays clear of the bits other
// components of the node set. (Cilium's identity marks and Calico's default mask, 0xffff0000,
// take bits egressd's default uses: Cilium's are reported when found, CNIConflict; with
// Calico, give egressd bits its --iptables-mark-mask leaves free.)
func CheckMarkMask(mask uint32) error {
	if mask == 0 {
		return fmt.Errorf("no bits: egressd steers with them")
	}
	if run := mask >> bits.TrailingZeros32(mask); run&(run+1) != 0 {
		return fmt.Errorf("%#x is not one run of bits: steering marks are numbers shifted into it", mask)
	}
	for _, o := range markOwners {
		if mask&o.bits != 0 {
			return fmt.Errorf("%#x overlaps %s, %#x", mask, o.owner, o.bits)
		}
	}
	return nil
}
