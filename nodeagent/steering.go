package nodeagent

import (
	"math/bits"
	"net/netip"
	"slices"
	"sort"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/egressip"
)

// maxSteerSlots bounds the egress paths a node steers through at once: one routing table and
// one rule per path, inside the ranges dataplane/routing reserves.
const maxSteerSlots = 100

// steering allocates a slot to every egress path (EgressIP object) local pods are steered
// through: its mark, the offset of its rules and its table. A path keeps its slot for as long
// as it is used, so a pod's mark does not change under it.
type steering struct {
	slots map[dataplane.Origin]int
}

// mark is the mark of slot under mask: slot numbers shifted into the mask's lowest bits.
func mark(slot int, mask uint32) uint32 { return uint32(slot) << bits.TrailingZeros32(mask) }

// capacity is how many slots fit: the marks the mask can hold (0 is none), and the tables.
func capacity(mask uint32) int {
	return min(int(mask>>bits.TrailingZeros32(mask)), maxSteerSlots)
}

// plan gives each path of steers a slot, keeping the slots of paths still used; paths beyond
// capacity get none (their pods are not steered, and guarded: dropped rather than leaked).
func (s *steering) plan(steers []egressip.Steer, mask uint32) map[dataplane.Origin]int {
	used := map[dataplane.Origin]bool{}
	for _, st := range steers {
		used[st.Origin] = true
	}
	next := map[dataplane.Origin]int{}
	taken := map[int]bool{}
	for o, slot := range s.slots {
		if used[o] {
			next[o] = slot
			taken[slot] = true
		}
	}
	var fresh []dataplane.Origin
	for o := range used {
		if _, ok := next[o]; !ok {
			fresh = append(fresh, o)
		}
	}
	sort.Slice(fresh, func(i, j int) bool { return fresh[i].Name < fresh[j].Name })
	slot := 1
	for _, o := range fresh {
		for taken[slot] {
			slot++
		}
		if slot > capacity(mask) {
			break
		}
		next[o] = slot
		taken[slot] = true
	}
	s.slots = next
	return next
}

// routing is the policy routing of the steered paths: per slot, `fwmark <mark>/<mask> lookup
// <table>` for both families, and a table whose default route spreads flows over the egress
// nodes (blackhole for a family without one: a marked packet never falls through to main).
func steeringRoutes(steers []egressip.Steer, slots map[dataplane.Origin]int, mask uint32) dataplane.RoutingState {
	via := map[dataplane.Origin]map[bool][]netip.Addr{} // by family (true: IPv4)
	for _, st := range steers {
		if _, ok := slots[st.Origin]; !ok {
			continue
		}
		if via[st.Origin] == nil {
			via[st.Origin] = map[bool][]netip.Addr{}
		}
		v4 := st.PodIP.Is4()
		for _, a := range st.Via {
			if !slices.Contains(via[st.Origin][v4], a) {
				via[st.Origin][v4] = append(via[st.Origin][v4], a)
			}
		}
	}
	var rs dataplane.RoutingState
	origins := make([]dataplane.Origin, 0, len(via))
	for o := range via {
		origins = append(origins, o)
	}
	sort.Slice(origins, func(i, j int) bool { return slots[origins[i]] < slots[origins[j]] })
	for _, o := range origins {
		slot := slots[o]
		table := dataplane.RouteTable{Origin: o, ID: slot}
		for _, v4 := range []bool{true, false} {
			rs.Rules = append(rs.Rules, dataplane.RouteRule{Origin: o, Priority: slot, IPv6: !v4, Mark: mark(slot, mask), Mask: mask, Table: slot})
			dst := netip.MustParsePrefix("0.0.0.0/0")
			if !v4 {
				dst = netip.MustParsePrefix("::/0")
			}
			gws := via[o][v4]
			slices.SortFunc(gws, netip.Addr.Compare)
			switch len(gws) {
			case 0:
				table.Routes = append(table.Routes, dataplane.Route{Dst: dst, Blackhole: true})
			case 1:
				table.Routes = append(table.Routes, dataplane.Route{Dst: dst, Via: &dataplane.Nexthop{Gateway: gws[0]}})
			default:
				r := dataplane.Route{Dst: dst}
				for _, gw := range gws {
					r.Nexthops = append(r.Nexthops, dataplane.Nexthop{Gateway: gw})
				}
				table.Routes = append(table.Routes, r)
			}
		}
		rs.Tables = append(rs.Tables, table)
	}
	return rs
}
