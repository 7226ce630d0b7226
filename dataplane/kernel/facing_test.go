package kernel

import (
	"maps"
	"net"
	"net/netip"
	"slices"
	"testing"
)

func testFacings() *facings {
	return &facings{trusted: true, readAgain: map[int]bool{}, byAddr: map[netip.Addr]facing{
		netip.MustParseAddr("10.244.1.2"): {"pod0", 10},
		netip.MustParseAddr("10.244.1.3"): {"cni0", 20},
		netip.MustParseAddr("10.244.2.4"): {"cni0", 20},
		netip.MustParseAddr("fd00::2"):    {"pod1", 11},
	}}
}

func remembered(f *facings) []string {
	var out []string
	for ip := range maps.Keys(f.byAddr) {
		out = append(out, ip.String())
	}
	slices.Sort(out)
	return out
}

// TestFacingsForget: the interface facing a pod address is looked up again (forgotten) when a
// main route over it changes (the default route: every address), when its link changes or
// goes, when its pod is gone, and when the events stop or start being watched; the rest is
// remembered, and a route change reports whether it concerned a pod address (a sync is due).
func TestFacingsForget(t *testing.T) {
	_, pods1, _ := net.ParseCIDR("10.244.1.0/24")
	_, other, _ := net.ParseCIDR("192.0.2.0/24")
	for _, tc := range []struct {
		name    string
		forget  func(f *facings) bool
		dropped bool
		left    []string
	}{
		{"route over two pods", func(f *facings) bool { return f.forgetRoute(pods1) }, true, []string{"10.244.2.4", "fd00::2"}},
		{"route over none", func(f *facings) bool { return f.forgetRoute(other) }, false, []string{"10.244.1.2", "10.244.1.3", "10.244.2.4", "fd00::2"}},
		{"default route", func(f *facings) bool { return f.forgetRoute(nil) }, true, nil},
		{"a bridge changed", func(f *facings) bool { f.linkChanged(20); return true }, true, []string{"10.244.1.2", "fd00::2"}},
		{"pods gone", func(f *facings) bool {
			f.keepOnly(map[netip.Addr]bool{netip.MustParseAddr("fd00::2"): true})
			return true
		}, true, []string{"fd00::2"}},
		{"watch restarted", func(f *facings) bool { f.watched(true); return true }, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := testFacings()
			if dropped := tc.forget(f); dropped != tc.dropped {
				t.Errorf("reported dropped %v, want %v", dropped, tc.dropped)
			}
			if got := remembered(f); !slices.Equal(got, tc.left) {
				t.Errorf("remembered %v, want %v", got, tc.left)
			}
		})
	}
}
