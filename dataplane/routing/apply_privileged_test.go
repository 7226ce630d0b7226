package routing

import (
	"net/netip"
	"regexp"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/test/privileged"
)

func expectIP(t *testing.T, l *lab, want string, args ...string) {
	t.Helper()
	if got := resilientParams.ReplaceAllString(l.ip(t, args...), " type resilient"); got != want {
		t.Errorf("ip %v:\n%s\nwant:\n%s", args, got, want)
	}
}

// resilientParams are the parameters iproute2 shows of a resilient group: egressd's, and the
// time a group has been unbalanced, which varies.
var resilientParams = regexp.MustCompile(` type resilient buckets 128 idle_timer 120 unbalanced_timer 1 unbalanced_time \d+`)

// Rules, tables and nexthop objects of testState, as iproute2 shows them.
const (
	wantRules = `0:	from all lookup local
6110:	from all fwmark 0x100/0xff00 lookup 7100 proto 229
6111:	from all fwmark 0x200/0xff00 lookup 7101 proto 229
6112:	from all fwmark 0x300/0xff00 lookup 7102 proto 229
6120:	from 10.9.0.0/16 lookup 7100 proto 229
32766:	from all lookup main
32767:	from all lookup default`
	wantRules6 = `0:	from all lookup local
6110:	from all fwmark 0x100/0xff00 lookup 7100 proto 229
6111:	from all fwmark 0x200/0xff00 lookup 7101 proto 229
6112:	from all fwmark 0x300/0xff00 lookup 7102 proto 229
6120:	from fd09::/64 lookup 7100 proto 229
32766:	from all lookup main`
	wantTable0 = `default via 10.1.1.2 dev e1 proto 229`
	wantTable1 = `203.0.113.5 nhid 71000002 proto 229
	nexthop via 10.1.1.2 dev e1 weight 1
	nexthop via 10.1.2.2 dev e2 weight 1`
	wantTable2  = `blackhole default proto 229`
	wantTable06 = `default via fd01:1::2 dev e1 proto 229 metric 1024 pref medium`
	wantTable16 = `2001:db8:5::5 nhid 71000005 proto 229 metric 1024 pref medium
	nexthop via fd01:1::2 dev e1 weight 1
	nexthop via fd01:2::2 dev e2 weight 1`
	wantTable26  = `blackhole default dev lo proto 229 metric 1024 pref medium`
	wantNexthops = `id 71000000 via 10.1.1.2 dev e1 scope link proto 229
id 71000001 via 10.1.2.2 dev e2 scope link proto 229
id 71000002 group 71000000/71000001 type resilient proto 229
id 71000003 via fd01:1::2 dev e1 scope link proto 229
id 71000004 via fd01:2::2 dev e2 scope link proto 229
id 71000005 group 71000003/71000004 type resilient proto 229`
)

func expectTestState(t *testing.T, l *lab) {
	t.Helper()
	expectIP(t, l, wantRules, "rule")
	expectIP(t, l, wantRules6, "-6", "rule")
	expectIP(t, l, wantTable0, "route", "show", "table", "7100")
	expectIP(t, l, wantTable1, "route", "show", "table", "7101")
	expectIP(t, l, wantTable2, "route", "show", "table", "7102")
	expectIP(t, l, wantTable06, "-6", "route", "show", "table", "7100")
	expectIP(t, l, wantTable16, "-6", "route", "show", "table", "7101")
	expectIP(t, l, wantTable26, "-6", "route", "show", "table", "7102")
	expectIP(t, l, wantNexthops, "nexthop")
}

func TestPrivilegedApplyInstallsExactlyTheStateAndRepeatsAsNoOp(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	r := l.router(t)
	if errs := r.Apply(testState(), nil); len(errs) != 0 {
		t.Fatal(errs)
	}
	expectTestState(t, l)

	writes := r.nl.writes
	if errs := r.Apply(testState(), nil); len(errs) != 0 {
		t.Fatal(errs)
	}
	if n := r.nl.writes - writes; n != 0 {
		t.Errorf("a repeated Apply made %d netlink writes, want 0", n)
	}
	expectTestState(t, l)
}

func TestPrivilegedApplyChangesRoutesInPlace(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	r := l.router(t)
	if errs := r.Apply(testState(), nil); len(errs) != 0 {
		t.Fatal(errs)
	}
	s := testState()
	s.Tables[0].Routes[0].Via.Gateway = netip.MustParseAddr("10.1.2.2") // table 7100 (v4) now via gw2
	s.Tables[1].Routes[0].Nexthops[1].Gateway = netip.MustParseAddr("10.1.3.2")
	s.Tables[2].Routes[0].Blackhole, s.Tables[2].Routes[0].Via = false, s.Tables[0].Routes[0].Via
	writes := r.nl.writes
	if errs := r.Apply(s, nil); len(errs) != 0 {
		t.Fatal(errs)
	}
	// One route replaced in 7100; one member created, the group replaced; one route in 7102.
	if n := r.nl.writes - writes; n != 4 {
		t.Errorf("Apply of three changes made %d writes, want 4", n)
	}
	expectIP(t, l, `default via 10.1.2.2 dev e2 proto 229`, "route", "show", "table", "7100")
	expectIP(t, l, `203.0.113.5 nhid 71000002 proto 229
	nexthop via 10.1.1.2 dev e1 weight 1
	nexthop via 10.1.3.2 dev e3 weight 1`, "route", "show", "table", "7101")
	expectIP(t, l, `default via 10.1.2.2 dev e2 proto 229`, "route", "show", "table", "7102")
	if err := r.Prune(s); err != nil {
		t.Fatal(err)
	}
	// gw2's old member object is no longer used by any group: gone; the rest stays.
	expectIP(t, l, `id 71000000 via 10.1.1.2 dev e1 scope link proto 229
id 71000002 group 71000000/71000006 type resilient proto 229
id 71000003 via fd01:1::2 dev e1 scope link proto 229
id 71000004 via fd01:2::2 dev e2 scope link proto 229
id 71000005 group 71000003/71000004 type resilient proto 229
id 71000006 via 10.1.3.2 dev e3 scope link proto 229`, "nexthop")
	expectIP(t, l, wantRules, "rule")
}

func TestPrivilegedBFDGatesGroupMembers(t *testing.T) {
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
		if err := r.Prune(testState()); err != nil {
			t.Fatal(err)
		}
	}
	apply()

	down[netip.MustParseAddr("10.1.1.2")], down[netip.MustParseAddr("fd01:2::2")] = true, true
	apply()
	expectIP(t, l, `203.0.113.5 nhid 71000002 via 10.1.2.2 dev e2 proto 229`, "route", "show", "table", "7101")
	expectIP(t, l, `2001:db8:5::5 nhid 71000005 proto 229 metric 1024 pref medium
	nexthop via fd01:1::2 dev e1 weight 1`, "-6", "route", "show", "table", "7101")
	// The down members' objects stay (Prune keeps them), out of their groups.
	expectIP(t, l, `id 71000000 via 10.1.1.2 dev e1 scope link proto 229
id 71000001 via 10.1.2.2 dev e2 scope link proto 229
id 71000002 group 71000001 type resilient proto 229
id 71000003 via fd01:1::2 dev e1 scope link proto 229
id 71000004 via fd01:2::2 dev e2 scope link proto 229
id 71000005 group 71000003 type resilient proto 229`, "nexthop")
	// table 7100 (a single gateway, not BFD-gated) is untouched.
	expectIP(t, l, wantTable0, "route", "show", "table", "7100")

	down[netip.MustParseAddr("10.1.2.2")] = true
	apply()
	expectIP(t, l, `blackhole 203.0.113.5 proto 229`, "route", "show", "table", "7101")
	// The group stays (with its last member: a group cannot be empty), to be refilled in place.
	expectIP(t, l, `id 71000000 via 10.1.1.2 dev e1 scope link proto 229
id 71000001 via 10.1.2.2 dev e2 scope link proto 229
id 71000002 group 71000001 type resilient proto 229
id 71000003 via fd01:1::2 dev e1 scope link proto 229
id 71000004 via fd01:2::2 dev e2 scope link proto 229
id 71000005 group 71000003 type resilient proto 229`, "nexthop")
	expectIP(t, l, `2001:db8:5::5 nhid 71000005 proto 229 metric 1024 pref medium
	nexthop via fd01:1::2 dev e1 weight 1`, "-6", "route", "show", "table", "7101")

	clear(down)
	apply()
	expectTestState(t, l) // same group IDs as before: replaced in place
}

// A node that steers nothing lists nothing: pods coming and going change the main table all
// the time, which makes every dump of it retry. Once a state is removed, nothing more is read
// until something is wanted again; a new router on a namespace holding egressd's objects reads
// them and removes them.
func TestPrivilegedNothingWantedReadsNothing(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	r := l.router(t)
	empty := &dataplane.RoutingState{}
	for range 2 {
		if errs := r.Apply(empty, nil); len(errs) != 0 {
			t.Fatal(errs)
		}
		if err := r.Prune(empty); err != nil {
			t.Fatal(err)
		}
	}
	if r.reads != 1 { // New's
		t.Errorf("a router that owns and wants nothing read the kernel %d times, want once (at New)", r.reads)
	}
	if errs := r.Apply(testState(), nil); len(errs) != 0 {
		t.Fatal(errs)
	}
	// A restarted agent that no longer wants any of it.
	r2 := l.router(t)
	if errs := r2.Apply(empty, nil); len(errs) != 0 {
		t.Fatal(errs)
	}
	if err := r2.Prune(empty); err != nil {
		t.Fatal(err)
	}
	expectIP(t, l, "", "nexthop")
	expectIP(t, l, "", "route", "show", "table", "7101")
	reads := r2.reads
	if errs := r2.Apply(empty, nil); len(errs) != 0 {
		t.Fatal(errs)
	}
	if err := r2.Prune(empty); err != nil {
		t.Fatal(err)
	}
	if r2.reads != reads {
		t.Errorf("after removing everything, a sync that wants nothing read the kernel %d times, want 0", r2.reads-reads)
	}
	// The first router wants its state again: it reads, and reinstalls it.
	if errs := r.Apply(testState(), nil); len(errs) != 0 {
		t.Fatal(errs)
	}
	expectTestState(t, l)
}
