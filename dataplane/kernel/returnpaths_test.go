package kernel

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestNeighbourChanged: a neighbour event asks for a sync when it changes the MAC of a return
// path's gateway from the one last given to nftables: a new MAC, the MAC lost (deleted, or the
// entry failed), or a gateway not resolved until now answering. An event that leaves the MAC
// as programmed, one still without a usable MAC, and one of any other neighbour do not.
func TestNeighbourChanged(t *testing.T) {
	const mac, other = "02:00:00:00:00:01", "02:00:00:00:00:02"
	f := &nftFacility{gatewayMACs: map[netip.Addr]string{
		netip.MustParseAddr("192.0.2.1"): mac,
		netip.MustParseAddr("fd00::1"):   mac,
		netip.MustParseAddr("192.0.2.9"): "", // asked for, not resolved yet
	}}
	event := func(typ uint16, ip string, state int, hw string) netlink.NeighUpdate {
		m, _ := net.ParseMAC(hw)
		return netlink.NeighUpdate{Type: typ, Neigh: netlink.Neigh{IP: net.ParseIP(ip), State: state, HardwareAddr: m}}
	}
	for _, tc := range []struct {
		name string
		u    netlink.NeighUpdate
		want bool
	}{
		{"same MAC, reachable", event(unix.RTM_NEWNEIGH, "192.0.2.1", netlink.NUD_REACHABLE, mac), false},
		{"same MAC, stale", event(unix.RTM_NEWNEIGH, "192.0.2.1", netlink.NUD_STALE, mac), false},
		{"same MAC, probed", event(unix.RTM_NEWNEIGH, "fd00::1", netlink.NUD_PROBE, mac), false},
		{"same MAC, permanent", event(unix.RTM_NEWNEIGH, "fd00::1", netlink.NUD_PERMANENT, mac), false},
		{"moved gateway", event(unix.RTM_NEWNEIGH, "192.0.2.1", netlink.NUD_REACHABLE, other), true},
		{"moved IPv6 gateway", event(unix.RTM_NEWNEIGH, "fd00::1", netlink.NUD_DELAY, other), true},
		{"entry failed", event(unix.RTM_NEWNEIGH, "192.0.2.1", netlink.NUD_FAILED, mac), true},
		{"entry deleted", event(unix.RTM_DELNEIGH, "192.0.2.1", netlink.NUD_REACHABLE, mac), true},
		{"unresolved gateway answers", event(unix.RTM_NEWNEIGH, "192.0.2.9", netlink.NUD_REACHABLE, other), true},
		{"unresolved gateway still asked", event(unix.RTM_NEWNEIGH, "192.0.2.9", netlink.NUD_INCOMPLETE, ""), false},
		{"another neighbour", event(unix.RTM_NEWNEIGH, "192.0.2.77", netlink.NUD_REACHABLE, other), false},
		{"no address", netlink.NeighUpdate{Type: unix.RTM_NEWNEIGH}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := f.neighbourChanged(tc.u); got != tc.want {
				t.Errorf("neighbourChanged = %v, want %v", got, tc.want)
			}
		})
	}
}
