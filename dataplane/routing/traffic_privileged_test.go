package routing

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/egressd/egressd/test/privileged"
)

// ping sends one echo request from the router namespace with the socket mark (0: none) and
// reports whether it was answered.
func (l *lab) ping(t *testing.T, v6 bool, mark uint32) bool {
	t.Helper()
	m := strconv.Itoa(int(mark)) // iputils takes decimal marks only
	args := []string{"-c", "1", "-W", "2", "-m", m, dst4}
	if v6 {
		args = []string{"-6", "-c", "1", "-W", "2", "-m", m, dst6}
	}
	_, err := l.r.Run("ping", args...)
	return err == nil
}

// TestPrivilegedMarkedTrafficFollowsTheTable sends real packets from the router namespace and
// counts them where they arrive: marked ones at the gateway of egressd's table, unmarked ones
// at the main table's gateway, and none anywhere when the table is a blackhole or all the ECMP
// members are down (drop, never a leak through main).
func TestPrivilegedMarkedTrafficFollowsTheTable(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	r := l.router(t)
	down := map[netip.Addr]bool{}
	up := func(p netip.Addr) bool { return !down[p] }
	apply := func() {
		t.Helper()
		if errs := r.Apply(testState(), up); len(errs) != 0 {
			t.Fatal(errs)
		}
	}
	apply()
	for _, v6 := range []bool{false, true} {
		at := func() [4]int {
			var n [4]int
			for i := 1; i <= 3; i++ {
				a, b := l.received(t, i)
				n[i] = a
				if v6 {
					n[i] = b
				}
			}
			return n
		}
		step := func(name string, mark uint32, answered bool, want func(before, after [4]int) bool) {
			t.Helper()
			before := at()
			if got := l.ping(t, v6, mark); got != answered {
				t.Errorf("v6=%v %s: answered %v, want %v", v6, name, got, answered)
			}
			if after := at(); !want(before, after) {
				t.Errorf("v6=%v %s: packets at gw1..gw3 went from %v to %v", v6, name, before[1:], after[1:])
			}
		}
		only := func(i int) func(b, a [4]int) bool {
			return func(b, a [4]int) bool {
				for j := 1; j <= 3; j++ {
					if (a[j]-b[j] == 1) != (j == i) {
						return false
					}
				}
				return true
			}
		}
		none := func(b, a [4]int) bool { return a == b }
		ecmp := func(b, a [4]int) bool { return a[1]+a[2]-b[1]-b[2] == 1 && a[3] == b[3] }

		step("unmarked", 0, true, only(3))
		step("mark 0x100 (table 7100, via gw1)", 0x100, true, only(1))
		step("mark 0x1ff (the mask keeps 0x100)", 0x1ff, true, only(1))
		step("mark 0x200 (table 7101, ECMP gw1+gw2)", 0x200, true, ecmp)
		step("mark 0x300 (table 7102, blackhole)", 0x300, false, none)

		gw := func(i string) netip.Addr {
			if v6 {
				return netip.MustParseAddr("fd01:" + i + "::2")
			}
			return netip.MustParseAddr("10.1." + i + ".2")
		}
		down[gw("1")] = true
		apply()
		step("mark 0x200, gw1 down", 0x200, true, only(2))
		down[gw("2")] = true
		apply()
		step("mark 0x200, gw1 and gw2 down", 0x200, false, none)
		clear(down)
		apply()
		step("mark 0x200, both back", 0x200, true, ecmp)
	}
}
