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

// without hands back the list itself when it drops nothing (an egress node's 10,000 SNAT
// entries are not copied at every merge), and a copy without the dropped elements otherwise,
// leaving the list as it was.
func TestWithoutCopiesOnlyWhatItDrops(t *testing.T) {
	odd := func(n int) bool { return n%2 == 1 }
	in := []int{2, 4, 6}
	if out := without(in, odd); !sameList(out, in) {
		t.Errorf("nothing dropped: a copy %v", out)
	}
	for _, c := range []struct{ in, want []int }{
		{[]int{1, 2, 3, 4}, []int{2, 4}},
		{[]int{2, 3, 4, 5}, []int{2, 4}},
		{[]int{1, 3}, []int{}},
	} {
		before := slices.Clone(c.in)
		out := without(c.in, odd)
		if !slices.Equal(out, c.want) {
			t.Errorf("without(%v) = %v, want %v", before, out, c.want)
		}
		if !slices.Equal(c.in, before) {
			t.Errorf("without(%v) changed its input to %v", before, c.in)
		}
	}
}
