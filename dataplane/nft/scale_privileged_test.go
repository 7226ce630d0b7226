package nft_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedTableAtScale: a node's whole table in one transaction, at the size the scale
// harness reached (100 EgressIPs selecting 10,000 pods of the cluster, the firewalled and
// DNS-snooped pods of a busy node): several MB of netlink messages, past a socket's default
// buffer, where the kernel refused the batch ("message too long") and the node kept none of it.
func TestPrivilegedTableAtScale(t *testing.T) {
	privileged.Require(t)
	ns := netns.New(t, "nft")
	apply, _, list := tableIn(t, ns)
	s := &dataplane.NftablesState{SteerMask: 0xffff0000, SteerDevices: []string{"egressd-vx"}}
	for i := range 40000 {
		ip4 := netip.AddrFrom4([4]byte{10, 128 + byte(i>>16), byte(i >> 8), byte(i)})
		ip6 := netip.AddrFrom16([16]byte{0xfd, 0, 0x10, 0x44, 14: byte(i >> 8), 15: byte(i)})
		s.Steered = append(s.Steered, dataplane.SteeredPod{Pod: ip4, Mark: 0x10000 * uint32(1+i%100), Remote: i%2 == 0})
		if i < 256*256 {
			s.FirewalledPods = append(s.FirewalledPods, ip6)
		}
	}
	apply(s)
	if got := strings.Count(list(), "10.128."); got < 10000 {
		t.Errorf("%d steered pods listed, want them all", got)
	}
}
