package routing

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/egressd/egressd/dataplane"
)

func TestConfigDefaultsAndValidation(t *testing.T) {
	d := DefaultConfig()
	if d.RulePriorityBase != 6100 || d.RulePriorityCount != 100 || d.TableBase != 7100 || d.TableCount != 100 || d.Protocol != 229 {
		t.Errorf("defaults: %+v", d)
	}
	if err := d.validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	for name, c := range map[string]Config{
		"priorities reach main": {RulePriorityBase: 32700, RulePriorityCount: 100},
		"negative priorities":   {RulePriorityBase: -5},
		"tables include main":   {TableBase: 200, TableCount: 60},
		"tables past 32 bits":   {TableBase: 0xfffffff0, TableCount: 100},
		"kernel protocol":       {Protocol: 4},
		"protocol past a byte":  {Protocol: 256},
	} {
		if err := c.withDefaults().validate(); err == nil {
			t.Errorf("%s: %+v validates", name, c.withDefaults())
		}
	}
}

func TestWantedReportsWhatCannotBeMappedByOrigin(t *testing.T) {
	good := dataplane.Origin{Kind: "K", Name: "good"}
	bad := dataplane.Origin{Kind: "K", Name: "bad"}
	via := &dataplane.Nexthop{Gateway: netip.MustParseAddr("10.0.0.1")}
	dst := netip.MustParsePrefix("192.0.2.7/24")
	s := &dataplane.RoutingState{
		Rules: []dataplane.RouteRule{
			{Origin: good, Priority: 99, Mark: 1, Table: 99},
			{Origin: bad, Priority: 100, Table: 0},
			{Origin: bad, Priority: 0, Table: -1},
			{Origin: bad, Priority: 0, IPv6: true, Src: netip.MustParsePrefix("10.0.0.0/8")},
		},
		Tables: []dataplane.RouteTable{
			{Origin: good, ID: 0, Routes: []dataplane.Route{{Dst: dst, Via: via}}},
			{Origin: bad, ID: 100, Routes: []dataplane.Route{{Dst: dst, Blackhole: true}}},
			{Origin: bad, ID: 0, Routes: []dataplane.Route{
				{Dst: dst, Blackhole: true}, // wanted differently by good
				{Dst: netip.MustParsePrefix("10.0.0.0/8"), Blackhole: true, Via: via},
				{Dst: netip.MustParsePrefix("10.0.0.0/8")},
				{Dst: netip.MustParsePrefix("2001:db8::/32"), Via: via},
			}},
		},
	}
	rules, routes, errs := DefaultConfig().wanted(s)
	if len(rules) != 1 || rules[0].key != (ruleKey{priority: 6199, mark: 1, mask: 0xffffffff, table: 7199}) {
		t.Errorf("rules: %+v", rules)
	}
	if len(routes) != 1 || routes[0].key != (routeKey{table: 7100, dst: netip.MustParsePrefix("192.0.2.0/24")}) {
		t.Errorf("routes: %+v", routes)
	}
	if errs[good] != nil {
		t.Errorf("good: %v", errs[good])
	}
	msg := errs[bad].Error()
	for _, want := range []string{"offset 100 outside 0..99", "offset -1", "not of the rule's family", "table offset 100",
		"also wanted, differently, by K good", "exactly one of", "other family"} {
		if !strings.Contains(msg, want) {
			t.Errorf("bad's errors lack %q:\n%s", want, msg)
		}
	}
	if n := strings.Count(msg, "exactly one of"); n != 2 {
		t.Errorf("%d routes reported without exactly one way, want 2:\n%s", n, msg)
	}
}
