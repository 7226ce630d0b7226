package routing

import (
	"testing"

	"github.com/vishvananda/netlink"
)

// TestSourceTable: an interface enslaved to a VRF has its routes in the VRF's table (upstream
// copies from there); any other, in main. (This machine's kernel has no VRF devices: the
// privileged tests cannot enslave one.)
func TestSourceTable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		master netlink.Link
		want   int
	}{
		{"no master", nil, 254},
		{"a VRF", &netlink.Vrf{Table: 1234}, 1234},
		{"a bridge", &netlink.Bridge{}, 254},
	} {
		if got := sourceTable(tc.master); got != tc.want {
			t.Errorf("%s: table %d, want %d", tc.name, got, tc.want)
		}
	}
}
