package kernel

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane"
)

// TestHostCIDRs: the node's published addresses are its global unicast ones, with their
// prefix length, sorted; link-local, loopback and those in the cluster
// networks (a CNI bridge's pod gateway) are left out.
func TestHostCIDRs(t *testing.T) {
	cluster := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")}
	var node []netip.Prefix
	for _, p := range []string{"2001:db8::5/64", "192.0.2.10/24", "198.51.100.7/24", "10.244.0.1/24",
		"fd00:10:244::1/64", "fe80::1/64", "127.0.0.1/8", "::1/128", "169.254.1.1/16", "10.0.0.5/8"} {
		node = append(node, netip.MustParsePrefix(p))
	}
	got := hostCIDRs(cluster, node)
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.5/8"), netip.MustParsePrefix("192.0.2.10/24"),
		netip.MustParsePrefix("198.51.100.7/24"), netip.MustParsePrefix("2001:db8::5/64")}
	if !slices.Equal(got, want) {
		t.Errorf("host CIDRs %v, want %v", got, want)
	}
}

// TestTunnel6: the tunnel carries IPv6 when some peer has an IPv6 nexthop and the device
// exists; IPv4 nexthops, written IPv4-mapped or not, make it IPv4 only.
func TestTunnel6(t *testing.T) {
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	local := netip.MustParseAddr("192.0.2.1")
	for _, tc := range []struct {
		name string
		s    dataplane.TunnelState
		want bool
	}{
		{"IPv6 nexthop", dataplane.TunnelState{Local: local, Peers: []dataplane.TunnelPeer{{Nexthops: addrs("10.0.0.2")}, {Nexthops: addrs("10.0.0.3", "fd00::3")}}}, true},
		{"IPv4 nexthops", dataplane.TunnelState{Local: local, Peers: []dataplane.TunnelPeer{{Nexthops: addrs("10.0.0.2", "::ffff:10.0.0.4")}}}, false},
		{"no device", dataplane.TunnelState{Peers: []dataplane.TunnelPeer{{Nexthops: addrs("fd00::3")}}}, false},
		{"no peers", dataplane.TunnelState{Local: local}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tunnel6(&tc.s); got != tc.want {
				t.Errorf("tunnel6 = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRenewalEvery: an egress address's lifetime is renewed at least three times per lifetime
// (two missed renewals do not drop it), and at most maxRenewal apart (a dead agent's address
// goes soon after its lifetime).
func TestRenewalEvery(t *testing.T) {
	for lifetime, want := range map[time.Duration]time.Duration{
		9 * time.Second:  3 * time.Second,
		15 * time.Second: 5 * time.Second,
		time.Hour:        5 * time.Second,
	} {
		if got := renewalEvery(lifetime); got != want {
			t.Errorf("renewalEvery(%v) = %v, want %v", lifetime, got, want)
		}
	}
}
