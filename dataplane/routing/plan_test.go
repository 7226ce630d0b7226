package routing

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/internal/golden"
)

// The routing plan rendered as text for golden files: the rules and routes a state maps to
// (Config.wanted) and the shape each route takes given the BFD sessions (shapeRoute), which is
// everything Apply decides before it resolves devices and nexthop objects in the kernel.

func renderPlan(c Config, s *dataplane.RoutingState, up func(netip.Addr) bool) string {
	var b strings.Builder
	rules, routes, errs := c.wanted(s)
	if len(rules)+len(routes)+len(errs) == 0 {
		return "no rules, no routes\n"
	}
	for _, r := range rules {
		fmt.Fprintf(&b, "%s  # %s\n", renderRule(r.key), r.origin)
	}
	for _, r := range routes {
		fmt.Fprintf(&b, "route table %d %s metric %d", r.key.table, r.key.dst, r.key.metric)
		if r.route.Src.IsValid() {
			fmt.Fprintf(&b, " src %s", r.route.Src)
		}
		fmt.Fprintf(&b, ": %s  # %s\n", renderShape(shapeRoute(r.route, up), up), r.origin)
	}
	for _, o := range slices.SortedFunc(maps.Keys(errs), func(a, b dataplane.Origin) int { return strings.Compare(a.String(), b.String()) }) {
		fmt.Fprintf(&b, "error %s: %v\n", o, errs[o])
	}
	return b.String()
}

// renderRule is like `ip rule`: `ipv4 6100: from 10.244.0.0/24 fwmark 0x10000/0xff0000 lookup 7100`.
func renderRule(k ruleKey) string {
	fam := "ipv4"
	if k.v6 {
		fam = "ipv6"
	}
	s := fmt.Sprintf("rule %s %d:", fam, k.priority)
	if k.src.IsValid() {
		s += " from " + k.src.String()
	}
	if k.mark != 0 || k.mask != 0 {
		s += fmt.Sprintf(" fwmark %#x/%#x", k.mark, k.mask)
	}
	return s + fmt.Sprintf(" lookup %d", k.table)
}

func renderShape(sh routeShape, up func(netip.Addr) bool) string {
	typ := map[uint8]string{unix.RTN_UNICAST: "unicast", unix.RTN_BLACKHOLE: "blackhole", unix.RTN_THROW: "throw"}[sh.typ]
	switch {
	case sh.via != nil:
		return typ + " via " + renderNexthop(*sh.via, up)
	case len(sh.members) > 0:
		group := "group"
		if sh.resilient {
			group = "resilient group"
		}
		var live, out []string
		for i, nh := range sh.members {
			if sh.live[i] {
				live = append(live, renderNexthop(nh, up))
			} else {
				out = append(out, renderNexthop(nh, up))
			}
		}
		s := fmt.Sprintf("%s, %s of [%s]", typ, group, strings.Join(live, ", "))
		if len(out) > 0 {
			s += fmt.Sprintf(", left out [%s]", strings.Join(out, ", "))
		}
		return s
	}
	return typ
}

func renderNexthop(nh dataplane.Nexthop, up func(netip.Addr) bool) string {
	var f []string
	if nh.Gateway.IsValid() {
		f = append(f, nh.Gateway.String())
	}
	if nh.Device != "" {
		f = append(f, "dev "+nh.Device)
	}
	if nh.Onlink {
		f = append(f, "onlink")
	}
	if nh.BFD {
		state := "down"
		if up(nh.Gateway) {
			state = "up"
		}
		f = append(f, "bfd "+state)
	}
	return strings.Join(f, " ")
}

var (
	addr   = netip.MustParseAddr
	prefix = netip.MustParsePrefix
	eipA   = dataplane.Origin{Kind: "EgressIP", Name: "eip-a"}
	eipB   = dataplane.Origin{Kind: "EgressIP", Name: "eip-b"}
	apbr   = dataplane.Origin{Kind: "AdminPolicyBasedExternalRoute", Name: "gws"}
	svc    = dataplane.Origin{Kind: "EgressService", Namespace: "a", Name: "db"}
)

// downPeers are the BFD peers whose session is not Up in these tests.
var downPeers = []netip.Addr{addr("192.0.2.11"), addr("2001:db8::11"), addr("192.0.2.21"), addr("192.0.2.22"), addr("192.0.2.30")}

func bfdUp(a netip.Addr) bool { return !slices.Contains(downPeers, a) }

func gw(a string) dataplane.Nexthop    { return dataplane.Nexthop{Gateway: addr(a)} }
func bfdGW(a string) dataplane.Nexthop { return dataplane.Nexthop{Gateway: addr(a), BFD: true} }
func tunnel(a string) dataplane.Nexthop {
	return dataplane.Nexthop{Gateway: addr(a), Device: dataplane.TunnelDevice, Onlink: true}
}

// planStates are representative routing states, for the golden files testdata/plan-<name>.golden.
var planStates = []struct {
	name string
	s    dataplane.RoutingState
}{
	{"empty", dataplane.RoutingState{}},
	// EgressIP steering: a rule per family and egress node's mark, under the steering mask,
	// selecting that node's table: the tunnel peer onlink (IPv6: its link-local gateway), or a
	// directly reached node; IPv6 cluster networks thrown back to main (reverse path checks).
	{"egressip-steering", dataplane.RoutingState{
		Rules: []dataplane.RouteRule{
			{Origin: eipA, Priority: 10, Mark: 0x10000, Mask: 0xff0000, Table: 0},
			{Origin: eipA, Priority: 10, IPv6: true, Mark: 0x10000, Mask: 0xff0000, Table: 0},
			{Origin: eipB, Priority: 11, Mark: 0x20000, Mask: 0xff0000, Table: 1},
		},
		Tables: []dataplane.RouteTable{
			{Origin: eipA, ID: 0, Routes: []dataplane.Route{
				{Dst: prefix("0.0.0.0/0"), Via: ptr(tunnel("192.0.2.2"))},
				{Dst: prefix("::/0"), Via: ptr(tunnel(dataplane.TunnelGateway6(addr("192.0.2.2")).String()))},
				{Dst: prefix("fd00:10:244::/56"), Throw: true},
				{Dst: prefix("fd00:96::/112"), Throw: true},
			}},
			{Origin: eipB, ID: 1, Routes: []dataplane.Route{
				{Dst: prefix("0.0.0.0/0"), Via: ptr(gw("192.0.2.3")), Src: addr("192.0.2.100")},
			}},
		},
	}},
	// External gateways: ECMP groups, a plain one when some member is not BFD-gated, a
	// resilient one when all are; members whose session is not Up are left out, and a route
	// without a live member is a blackhole; rules by source pod and mark, at their priorities.
	{"external-gateways", dataplane.RoutingState{
		Rules: []dataplane.RouteRule{
			{Origin: apbr, Priority: 20, Src: prefix("10.244.0.5/32"), Table: 2},
			{Origin: apbr, Priority: 20, IPv6: true, Src: prefix("fd00:10:244::5/128"), Table: 2},
			{Origin: apbr, Priority: 21, Mark: 0x50000, Mask: 0xff0000, Table: 3},
			{Origin: apbr, Priority: 22, Mark: 0x7, Table: 4},
		},
		Tables: []dataplane.RouteTable{
			{Origin: apbr, ID: 2, Routes: []dataplane.Route{
				{Dst: prefix("0.0.0.0/0"), Nexthops: []dataplane.Nexthop{gw("192.0.2.10"), bfdGW("192.0.2.11"), {Gateway: addr("192.0.2.12"), Device: "eth1"}}},
				{Dst: prefix("::/0"), Nexthops: []dataplane.Nexthop{bfdGW("2001:db8::10"), bfdGW("2001:db8::11")}},
			}},
			{Origin: apbr, ID: 3, Routes: []dataplane.Route{
				{Dst: prefix("0.0.0.0/0"), Nexthops: []dataplane.Nexthop{bfdGW("192.0.2.21"), bfdGW("192.0.2.22")}},
				{Dst: prefix("198.51.100.0/24"), Via: ptr(bfdGW("192.0.2.30"))},
				{Dst: prefix("203.0.113.0/24"), Via: ptr(bfdGW("192.0.2.31"))},
			}},
			{Origin: apbr, ID: 4, Routes: []dataplane.Route{{Dst: prefix("0.0.0.0/0"), Blackhole: true}}},
		},
	}},
	// EgressService on a named network: the rule looks up that table, not one of egressd's.
	// A route wanted twice the same way is written once.
	{"egressservice", dataplane.RoutingState{
		Rules: []dataplane.RouteRule{{Origin: svc, Priority: 30, Src: prefix("10.244.0.8/32"), Network: "1000"}},
		Tables: []dataplane.RouteTable{
			{Origin: svc, ID: 5, Routes: []dataplane.Route{{Dst: prefix("10.0.0.0/8"), Via: ptr(gw("192.0.2.40"))}}},
			{Origin: eipA, ID: 5, Routes: []dataplane.Route{{Dst: prefix("10.0.0.0/8"), Via: ptr(gw("192.0.2.40"))}}},
		},
	}},
}

func ptr[T any](v T) *T { return &v }

// TestPlanGolden: the rules, routes and route shapes (single gateway, ECMP group, resilient
// group, blackhole, throw) Apply writes for representative states, with some BFD sessions
// down.
func TestPlanGolden(t *testing.T) {
	for _, tc := range planStates {
		t.Run(tc.name, func(t *testing.T) {
			golden.Assert(t, "testdata/plan-"+tc.name+".golden", renderPlan(DefaultConfig(), &tc.s, bfdUp))
		})
	}
}
