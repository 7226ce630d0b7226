package cluster

import (
	"net/netip"
	"testing"
)

// TestParseCIDRAsUpstream: what upstream's net.ParseCIDR takes (a prefix length with leading
// zeros, an address with host bits), masked; what it refuses, with its message.
func TestParseCIDRAsUpstream(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"10.0.0.0/08", "10.0.0.0/8", ""},
		{"10.1.2.3/16", "10.1.0.0/16", ""},
		{"::/00", "::/0", ""},
		{"2001:db8::1/064", "2001:db8::/64", ""},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8", ""},
		{"::ffff:0:0/96", "0.0.0.0/0", ""},
		{"::ffff:0:0/80", "::/80", ""},
		{"010.0.0.0/8", "", "invalid CIDR address: 010.0.0.0/8"},
		{"1.2.3.4/42", "", "invalid CIDR address: 1.2.3.4/42"},
	} {
		p, err := ParseCIDR(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || p != netip.MustParsePrefix(tc.want) {
			t.Errorf("%s: %v, %v; want %s", tc.in, p, err, tc.want)
		}
	}
}
