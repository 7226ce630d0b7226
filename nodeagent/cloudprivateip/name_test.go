package cloudprivateip

import (
	"net/netip"
	"testing"
)

func TestNameRoundTrip(t *testing.T) {
	for _, tc := range []struct{ ip, name string }{
		{"10.0.0.5", "10.0.0.5"},
		{"fc00:f853:ccd:e793::54", "fc00.f853.0ccd.e793.0000.0000.0000.0054"}, // upstream's example
		{"::1", "0000.0000.0000.0000.0000.0000.0000.0001"},
	} {
		ip := netip.MustParseAddr(tc.ip)
		if got := Name(ip); got != tc.name {
			t.Errorf("Name(%s) = %s, want %s", tc.ip, got, tc.name)
		}
		if got, err := ParseName(tc.name); err != nil || got != ip {
			t.Errorf("ParseName(%s) = %v, %v; want %s", tc.name, got, err, ip)
		}
	}
	for _, bad := range []string{"fc00.f853", "zzzz.f853.0ccd.e793.0000.0000.0000.0054", "fc00:f853:ccd:e793::54", "egress"} {
		if _, err := ParseName(bad); err == nil {
			t.Errorf("ParseName(%s) accepted", bad)
		}
	}
}
