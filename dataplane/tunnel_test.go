package dataplane

import (
	"net/netip"
	"testing"
)

func TestTunnelAddresses(t *testing.T) {
	a := netip.MustParseAddr
	if got := TunnelMAC(a("172.18.0.3")).String(); got != "02:e5:ac:12:00:03" {
		t.Errorf("TunnelMAC(172.18.0.3) = %s", got)
	}
	if got := TunnelGateway6(a("172.18.0.3")); got != a("fe80::e5:acff:fe12:3") {
		t.Errorf("TunnelGateway6(172.18.0.3) = %s, want the EUI-64 link-local address of its MAC", got)
	}
	m6 := TunnelMAC(a("fc00::3"))
	if m6[0] != 0x06 || m6[1] != 0xe5 || m6.String() == TunnelMAC(a("fc00::4")).String() {
		t.Errorf("TunnelMAC(fc00::3) = %s: want 06:e5 and a hash distinct from fc00::4's", m6)
	}
}
