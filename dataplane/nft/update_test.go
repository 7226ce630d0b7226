package nft

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/dataplane"
)

// updateBase is a table as written, which the cases below change one thing of.
func updateBase() dataplane.NftablesState {
	return dataplane.NftablesState{
		SteerMask:     0x00ff0000,
		BackendDenies: []dataplane.BackendDeny{denyOf("a", 0, "10.244.0.5", "203.0.113.10", 6, 80)},
		SNAT: []dataplane.SNAT{{Origin: eipA, Pod: addr("10.244.0.5"), To: addr("192.0.2.100")},
			{Origin: eipA, Pod: addr("fd00:10:244::5"), To: addr("2001:db8::100")}},
		Exempt:  []netip.Prefix{prefix("10.244.0.0/16"), prefix("10.96.0.0/12")},
		Guarded: []netip.Addr{addr("10.244.0.5"), addr("fd00:10:244::5")},
		Steered: []dataplane.SteeredPod{{Pod: addr("10.244.0.6"), Mark: 0x10000}},
	}
}

// planOf is what Apply would write for s on a new table.
func planOf(s dataplane.NftablesState) contents {
	c, _, _, _ := (&Table{}).plan(&s)
	return c
}

// updateCases change one thing of updateBase.
var updateCases = []struct {
	name   string
	change func(s *dataplane.NftablesState)
	// elements are what an update in place deletes (-) and adds (+); natChanged the pods whose
	// NAT changes.
	elements   []string
	natChanged []string
}{
	{name: "unchanged", change: func(*dataplane.NftablesState) {}},
	{name: "deny added", change: func(s *dataplane.NftablesState) {
		s.BackendDenies = append(s.BackendDenies, denyOf("a", 1, "10.244.0.5", "203.0.113.11", 6, 443))
	}, elements: []string{"+ fw_backend_deny4 10.244.0.5 . 203.0.113.11 . tcp . 443"}},
	{name: "deny removed", change: func(s *dataplane.NftablesState) { s.BackendDenies = nil },
		elements: []string{"- fw_backend_deny4 10.244.0.5 . 203.0.113.10 . tcp . 80"}},
	// Same start, another end: the entry is the same, its content (the end) changed.
	{name: "interval grows", change: func(s *dataplane.NftablesState) { s.Exempt[0] = prefix("10.244.0.0/15") },
		elements: []string{"+ egressip_exempt4 10.244.0.0", "+ egressip_exempt4 end 10.246.0.0",
			"- egressip_exempt4 10.244.0.0", "- egressip_exempt4 end 10.245.0.0"}},
	{name: "interval moves", change: func(s *dataplane.NftablesState) { s.Exempt[0] = prefix("10.240.0.0/12") },
		elements: []string{"+ egressip_exempt4 10.240.0.0", "+ egressip_exempt4 end 11.0.0.0",
			"- egressip_exempt4 10.244.0.0", "- egressip_exempt4 end 10.245.0.0"}},
	{name: "SNAT to another egress IP", change: func(s *dataplane.NftablesState) { s.SNAT[0].To = addr("192.0.2.101") },
		elements: []string{"+ egressip_addrs4 192.0.2.101", "+ egressip_snat4 10.244.0.5 : 192.0.2.101",
			"- egressip_addrs4 192.0.2.100", "- egressip_snat4 10.244.0.5 : 192.0.2.100"},
		natChanged: []string{"10.244.0.5"}},
	{name: "SNAT removed, still guarded", change: func(s *dataplane.NftablesState) { s.SNAT = s.SNAT[:1] },
		elements:   []string{"- egressip_addrs6 2001:db8::100", "- egressip_snat6 fd00:10:244::5 : 2001:db8::100"},
		natChanged: []string{"fd00:10:244::5"}},
	{name: "pod newly guarded", change: func(s *dataplane.NftablesState) { s.Guarded = append(s.Guarded, addr("10.244.0.9")) },
		elements: []string{"+ egressip_guarded4 10.244.0.9"}, natChanged: []string{"10.244.0.9"}},
	// The map's element keeps its key and changes its verdict: deleted and added again.
	{name: "steering mark changes", change: func(s *dataplane.NftablesState) { s.Steered[0].Mark = 0x20000 },
		elements: []string{"+ steer_pods4 10.244.0.6 : jump steer_mark_00020000", "- steer_pods4 10.244.0.6 : jump steer_mark_00010000"}},
}

// TestChangedElements: an update in place sends only the elements of the entries that went,
// came or whose content changed (a SNAT's egress IP, a verdict, an interval's end), both the
// start and the end marker of an interval.
func TestChangedElements(t *testing.T) {
	written := planOf(updateBase())
	for _, tc := range updateCases {
		t.Run(tc.name, func(t *testing.T) {
			s := updateBase()
			tc.change(&s)
			want := planOf(s)
			var got []string
			for _, def := range setDefs {
				del, add := changedElements(written, want, def)
				for _, el := range del {
					got = append(got, "- "+def.Name+" "+renderElement(def, el))
				}
				for _, el := range add {
					got = append(got, "+ "+def.Name+" "+renderElement(def, el))
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.elements) {
				t.Errorf("changed elements:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.elements, "\n"))
			}
		})
	}
}

// TestNATChanges: the pods whose conntrack entries are deleted after a write are those whose
// SNAT appeared, went or changed its egress IP, or whose guard did; nothing else (a changed
// steering mark) touches their flows.
func TestNATChanges(t *testing.T) {
	written := planOf(updateBase())
	for _, tc := range updateCases {
		t.Run(tc.name, func(t *testing.T) {
			s := updateBase()
			tc.change(&s)
			var got []string
			for _, a := range natChanges(written, planOf(s)) {
				got = append(got, a.String())
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.natChanged) {
				t.Errorf("NAT changes of %v, want %v", got, tc.natChanged)
			}
		})
	}
}
