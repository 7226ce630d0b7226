package routing

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedRestartAdoptsThenPrunesOnlyItsOwn: a second Router in the same namespace (an
// agent restart) finds the first one's objects and changes nothing; Prune and Cleanup then
// remove egressd's objects and only them.
func TestPrivilegedRestartAdoptsThenPrunesOnlyItsOwn(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	first := l.router(t)
	if errs := first.Apply(testState(), nil); len(errs) != 0 {
		t.Fatal(errs)
	}
	// Not egressd's: a rule outside its range (even one selecting its table), a route in main,
	// routes of another protocol in egressd's tables, a nexthop object of another protocol.
	if err := l.r.Script(
		"ip rule add priority 6000 fwmark 0x900 lookup 7100",
		"ip route add 192.0.2.0/24 via 10.1.3.2",
		"ip route add 198.51.100.0/24 via 10.1.3.2 table 7100 proto static",
		"ip -6 route add 2001:db8:7::/64 via fd01:3::2 table 7101 proto static",
		"ip nexthop add id 5 via 10.1.3.2 dev e3",
	); err != nil {
		t.Fatal(err)
	}
	first.Close()

	second := l.router(t)
	if n := len(second.groups); n != 2 {
		t.Errorf("the restarted router adopted %d groups, want 2", n)
	}
	if errs := second.Apply(testState(), nil); len(errs) != 0 {
		t.Fatal(errs)
	}
	if second.nl.writes != 0 {
		t.Errorf("the restarted router made %d writes to apply the same state, want 0", second.nl.writes)
	}

	// A wanted route whose key another owner holds is an error for its Origin, and that
	// route stays.
	s := testState()
	taken := dataplane.Origin{Kind: "EgressService", Namespace: "ns", Name: "taken"}
	s.Tables = append(s.Tables, dataplane.RouteTable{Origin: taken, ID: 0, Routes: []dataplane.Route{
		{Dst: netip.MustParsePrefix("198.51.100.0/24"), Blackhole: true}}})
	s.Rules = append(s.Rules, dataplane.RouteRule{Origin: taken, Priority: 100, Table: 0})
	errs := second.Apply(s, nil)
	if len(errs) != 1 || !strings.Contains(errs[taken].Error(), "does not own") || !strings.Contains(errs[taken].Error(), "offset 100") {
		t.Errorf("Apply with a route egressd does not own and a rule out of range: %v", errs)
	}

	// Pruning to the state without origin2 (table 7102 and its rules) removes just that.
	s = testState()
	s.Rules = s.Rules[:0]
	for _, r := range testState().Rules {
		if r.Origin != origin2 {
			s.Rules = append(s.Rules, r)
		}
	}
	s.Tables = []dataplane.RouteTable{s.Tables[0], s.Tables[1], s.Tables[3], s.Tables[4]}
	if err := second.Prune(s); err != nil {
		t.Fatal(err)
	}
	foreignRule := "6000:	from all fwmark 0x900 lookup 7100"
	expectIP(t, l, strings.Replace(strings.Replace(wantRules, "6112:	from all fwmark 0x300/0xff00 lookup 7102 proto 229\n", "", 1),
		"0:	from all lookup local\n", "0:	from all lookup local\n"+foreignRule+"\n", 1), "rule")
	expectIP(t, l, "", "route", "show", "table", "7102")
	expectIP(t, l, "", "-6", "route", "show", "table", "7102")
	expectIP(t, l, wantTable0+"\n198.51.100.0/24 via 10.1.3.2 dev e3 proto static", "route", "show", "table", "7100")

	if err := l.r.Do(func() error { return Cleanup(Config{}) }); err != nil {
		t.Fatal(err)
	}
	expectIP(t, l, "0:	from all lookup local\n"+foreignRule+"\n32766:	from all lookup main\n32767:	from all lookup default", "rule")
	expectIP(t, l, "0:	from all lookup local\n32766:	from all lookup main", "-6", "rule")
	expectIP(t, l, "198.51.100.0/24 via 10.1.3.2 dev e3 proto static", "route", "show", "table", "7100")
	expectIP(t, l, "", "route", "show", "table", "7101")
	expectIP(t, l, "2001:db8:7::/64 via fd01:3::2 dev e3 proto static metric 1024 pref medium", "-6", "route", "show", "table", "7101")
	expectIP(t, l, "", "-6", "route", "show", "table", "7100")
	expectIP(t, l, "id 5 via 10.1.3.2 dev e3 scope link", "nexthop")
	expectIP(t, l, `default via 10.1.3.2 dev e3
10.1.1.0/24 dev e1 proto kernel scope link src 10.1.1.1
10.1.2.0/24 dev e2 proto kernel scope link src 10.1.2.1
10.1.3.0/24 dev e3 proto kernel scope link src 10.1.3.1
192.0.2.0/24 via 10.1.3.2 dev e3`, "route")
}
