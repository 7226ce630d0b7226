package addresses

import (
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPlaceByNetwork: an address without a named interface goes to the UP interface whose
// network contains it, the longest prefix first and the lowest index on a tie; host prefixes
// (other egress addresses), egressd's own addresses, link-local and non-universe addresses, and
// interfaces that are down or loopback say nothing about the networks.
func TestPlaceByNetwork(t *testing.T) {
	const proto = 229
	k := func(p string, ifindex int, scope uint8, proto uint8) kaddr {
		return kaddr{prefix: netip.MustParsePrefix(p), ifindex: ifindex, scope: scope, proto: proto}
	}
	global := uint8(unix.RT_SCOPE_UNIVERSE)
	kernel := []kaddr{
		k("192.0.2.10/24", 1, global, 0),
		k("192.0.2.130/25", 2, global, 0),   // longer than eth1's /24
		k("198.51.100.10/24", 3, global, 0), // on a down interface
		k("203.0.113.5/32", 4, global, 0),   // a host prefix
		k("10.0.0.5/8", 5, global, proto),   // egressd's own
		k("100.64.0.1/10", 6, unix.RT_SCOPE_LINK, 0),
		k("172.16.0.1/16", 7, global, 0), // a tie with 8: the lower index
		k("172.16.0.2/16", 8, global, 0),
		k("fe80::1/64", 1, global, 0),
		k("2001:db8::10/64", 2, global, 0),
		k("127.0.0.1/8", 9, global, 0), // loopback (readLinks counts it as down)
	}
	links := &linkSet{up: map[int]bool{1: true, 2: true, 3: false, 4: true, 5: true, 6: true, 7: true, 8: true, 9: false}}
	a := &Addresses{protocol: proto}
	for _, tc := range []struct {
		ip   string
		want int    // the interface index, or
		err  string // an error containing this
	}{
		{ip: "192.0.2.50", want: 1},
		{ip: "192.0.2.200", want: 2},
		{ip: "2001:db8::99", want: 2},
		{ip: "172.16.9.9", want: 7},
		{ip: "198.51.100.99", err: "no UP interface"},
		{ip: "203.0.113.5", err: "no UP interface"},
		{ip: "10.1.2.3", err: "no UP interface"},
		{ip: "100.64.0.9", err: "no UP interface"},
		{ip: "fe80::99", err: "no UP interface"},
		{ip: "127.0.0.9", err: "no UP interface"},
	} {
		t.Run(tc.ip, func(t *testing.T) {
			got, err := a.place("", netip.MustParseAddr(tc.ip), kernel, links)
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("placed on %d, error %v; want an error with %q", got, err, tc.err)
			case tc.err == "" && (err != nil || got != tc.want):
				t.Errorf("placed on %d, error %v; want %d", got, err, tc.want)
			}
		})
	}
}
