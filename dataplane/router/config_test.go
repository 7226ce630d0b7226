package router

import (
	"net/netip"
	"strings"
	"testing"
)

// TestValidate: a router the kernel would refuse halfway (an unknown macvlan mode, no address,
// two default routes of one family) or that could not reach where it sends traffic (a gateway,
// redirect destination or fallback without a router address of its family to leave from) is
// refused before anything is configured; a dual-stack router is not.
func TestValidate(t *testing.T) {
	v4, v6 := netip.MustParsePrefix("192.0.2.10/24"), netip.MustParsePrefix("2001:db8::10/64")
	gw4, gw6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	rule := func(dst string) Rule { return Rule{Protocol: TCP, Port: 80, Destination: netip.MustParseAddrPort(dst)} }
	for _, tc := range []struct {
		name string
		c    Config
		err  string // "" when valid
	}{
		{"dual stack", Config{Mode: Bridge, Addresses: []netip.Prefix{v4, v6}, Gateways: []netip.Addr{gw4, gw6},
			Rules: []Rule{rule("203.0.113.5:8080"), rule("[2001:db8:1::5]:80")}, Fallback: netip.MustParseAddr("2001:db8:1::9")}, ""},
		{"every mode", Config{Mode: Passthru, Addresses: []netip.Prefix{v4}}, ""},
		{"unknown mode", Config{Mode: "bridge", Addresses: []netip.Prefix{v4}}, `macvlan mode "bridge"`},
		{"no mode", Config{Addresses: []netip.Prefix{v4}}, `macvlan mode ""`},
		{"no address", Config{Mode: VEPA}, "no address"},
		{"two IPv4 gateways", Config{Mode: Private, Addresses: []netip.Prefix{v4}, Gateways: []netip.Addr{gw4, netip.MustParseAddr("192.0.2.2")}}, "two gateways"},
		{"IPv6 gateway without IPv6 address", Config{Mode: Bridge, Addresses: []netip.Prefix{v4}, Gateways: []netip.Addr{gw6}}, "gateway 2001:db8::1 has no address"},
		{"IPv6 destination without IPv6 address", Config{Mode: Bridge, Addresses: []netip.Prefix{v4}, Rules: []Rule{rule("[2001:db8:1::5]:80")}}, "destination 2001:db8:1::5"},
		{"IPv4 fallback without IPv4 address", Config{Mode: Bridge, Addresses: []netip.Prefix{v6}, Fallback: netip.MustParseAddr("203.0.113.9")}, "fallback 203.0.113.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one saying %q", err, tc.err)
			}
		})
	}
}

// TestSourceIsTheFirstAddressOfItsFamily: what leaves the macvlan is SNATed to the first
// router address of its family, whatever the order of the families.
func TestSourceIsTheFirstAddressOfItsFamily(t *testing.T) {
	c := Config{Addresses: []netip.Prefix{netip.MustParsePrefix("2001:db8::10/64"), netip.MustParsePrefix("192.0.2.10/24"),
		netip.MustParsePrefix("192.0.2.11/24"), netip.MustParsePrefix("2001:db8::11/64")}}
	if a, ok := c.source(true); !ok || a != netip.MustParseAddr("192.0.2.10") {
		t.Errorf("IPv4 source %v (%v), want 192.0.2.10", a, ok)
	}
	if a, ok := c.source(false); !ok || a != netip.MustParseAddr("2001:db8::10") {
		t.Errorf("IPv6 source %v (%v), want 2001:db8::10", a, ok)
	}
	if _, ok := (&Config{Addresses: c.Addresses[1:3]}).source(false); ok {
		t.Error("an IPv6 source without an IPv6 address")
	}
}
