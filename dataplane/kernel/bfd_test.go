package kernel

import (
	"net/netip"
	"testing"
	"time"
)

// TestUpInheritsThePreviousAgentsGateways: after a restart, a gateway the previous agent's
// routes used counts as alive until the grace ends (its new BFD session starts Down); then
// only sessions speak, and a gateway never inherited is not alive without one.
func TestUpInheritsThePreviousAgentsGateways(t *testing.T) {
	used, other := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	f := &bfdFacility{ask: func() {}}
	f.inherit([]netip.Addr{used})
	up := f.up()
	if !up(used) || up(other) {
		t.Errorf("within the grace: up(used) = %v, up(other) = %v; want true, false", up(used), up(other))
	}
	f.inheritUntil = time.Now().Add(-time.Millisecond) // the grace is over
	if f.up()(used) {
		t.Error("an inherited gateway is still alive after the grace, without a session Up")
	}
	if f.inherited != nil {
		t.Errorf("inherited %v kept after the grace", f.inherited)
	}
	empty := &bfdFacility{}
	empty.inherit(nil)
	if empty.up()(used) {
		t.Error("a first start took a gateway as alive")
	}
}
