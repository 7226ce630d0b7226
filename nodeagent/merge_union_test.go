package nodeagent

import (
	"net/netip"
	"slices"
	"testing"
)

// union merges sorted lists in one pass, sorts a copy of a list that is not, and keeps each
// element once, also one in both lists or twice in one.
func TestUnion(t *testing.T) {
	p := netip.MustParsePrefix
	a := []netip.Prefix{p("10.0.0.0/8"), p("10.0.0.0/16"), p("10.1.0.1/32"), p("fd00::/64")}
	slices.SortFunc(a, netip.Prefix.Compare)
	b := []netip.Prefix{p("192.0.2.1/32"), p("10.0.0.0/16"), p("10.0.0.0/24"), p("10.0.0.0/24")} // unsorted
	before := slices.Clone(b)
	got := union(a, b, netip.Prefix.Compare)
	want := []netip.Prefix{p("10.0.0.0/8"), p("10.0.0.0/16"), p("10.0.0.0/24"), p("10.1.0.1/32"), p("192.0.2.1/32"), p("fd00::/64")}
	if !slices.Equal(got, want) {
		t.Errorf("union %v, want %v", got, want)
	}
	if !slices.Equal(b, before) {
		t.Errorf("union sorted its argument: %v", b)
	}
	if got := union(a, nil, netip.Prefix.Compare); !slices.Equal(got, a) {
		t.Errorf("union with nothing %v, want %v", got, a)
	}
}
