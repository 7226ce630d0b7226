package nodeagent

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/egressip"
)

// The merge's memo gives what its functions make of the inputs of each sync, and the same
// lists again while the inputs stay equal (in new slices, as every sync makes them).
func TestMergeMemoFollowsItsInputs(t *testing.T) {
	a := netip.MustParseAddr
	snat := func(pods ...string) []dataplane.SNAT {
		var out []dataplane.SNAT
		for _, p := range pods {
			out = append(out, dataplane.SNAT{Origin: dataplane.Origin{Kind: "EgressIP", Name: "e"}, Pod: a(p), To: a("172.18.0.100")})
		}
		return out
	}
	local := func(pods ...string) map[netip.Addr]bool {
		out := map[netip.Addr]bool{}
		for _, p := range pods {
			out[a(p)] = true
		}
		return out
	}
	m := &mergeMemo{}
	var last []dataplane.SteeredPod
	for _, step := range []struct {
		name         string
		service, eip []dataplane.SNAT
		local        map[netip.Addr]bool
		mark         uint32
		same         bool
	}{
		{"first", nil, snat("10.244.2.5", "10.244.1.5"), local("10.244.1.5"), 0x10000, false},
		{"the same, in new slices", nil, snat("10.244.2.5", "10.244.1.5"), local("10.244.1.5"), 0x10000, true},
		{"a pod more", nil, snat("10.244.2.5", "10.244.1.5", "10.244.3.5"), local("10.244.1.5"), 0x10000, false},
		{"the service's SNAT", snat("10.244.4.5"), snat("10.244.2.5", "10.244.1.5", "10.244.3.5"), local("10.244.1.5"), 0x10000, false},
		{"a pod became local", snat("10.244.4.5"), snat("10.244.2.5", "10.244.1.5", "10.244.3.5"), local("10.244.1.5", "10.244.2.5"), 0x10000, false},
		{"another mark", snat("10.244.4.5"), snat("10.244.2.5", "10.244.1.5", "10.244.3.5"), local("10.244.1.5", "10.244.2.5"), 0x20000, false},
		{"the same again", snat("10.244.4.5"), snat("10.244.2.5", "10.244.1.5", "10.244.3.5"), local("10.244.1.5", "10.244.2.5"), 0x20000, true},
	} {
		s := m.snat(step.service, step.eip)
		if want := append(slices.Clone(step.service), step.eip...); !slices.Equal(s, want) {
			t.Errorf("%s: SNAT %v, want %v", step.name, s, want)
		}
		remote := m.remoteSNAT(s, step.local)
		if want := remoteSNAT(s, step.local); !slices.Equal(remote, want) {
			t.Errorf("%s: remote pods %v, want %v", step.name, remote, want)
		}
		replies := m.replies(remote, step.mark)
		if len(replies) != len(remote) {
			t.Fatalf("%s: %d replies for %d remote pods", step.name, len(replies), len(remote))
		}
		for i, r := range replies {
			if r.Pod != remote[i] || r.Mark != step.mark {
				t.Errorf("%s: reply %v, want %v with mark %#x", step.name, r, remote[i], step.mark)
			}
		}
		if same := sameList(replies, last); same != step.same {
			t.Errorf("%s: the last replies handed again %v, want %v", step.name, same, step.same)
		}
		last = replies
	}
}

// The unions of the exempt destinations and of the guarded addresses are the lists union makes,
// and the same list while the inputs stay equal.
func TestMergeMemoUnions(t *testing.T) {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	m := &mergeMemo{}
	var lastExempt []netip.Prefix
	var lastGuarded []netip.Addr
	for _, step := range []struct {
		name            string
		eip, service    []netip.Prefix
		vips            []netip.Prefix
		guarded, served []netip.Addr
		same            bool
	}{
		{"first", []netip.Prefix{p("10.0.0.0/8")}, []netip.Prefix{p("192.0.2.1/32")}, nil, []netip.Addr{a("10.244.1.5")}, []netip.Addr{a("10.244.2.5")}, false},
		{"equal, new slices", []netip.Prefix{p("10.0.0.0/8")}, []netip.Prefix{p("192.0.2.1/32")}, nil, []netip.Addr{a("10.244.1.5")}, []netip.Addr{a("10.244.2.5")}, true},
		{"a VIP", []netip.Prefix{p("10.0.0.0/8")}, []netip.Prefix{p("192.0.2.1/32")}, []netip.Prefix{p("198.51.100.7/32")}, []netip.Addr{a("10.244.1.5")}, []netip.Addr{a("10.244.2.5"), a("10.244.3.5")}, false},
	} {
		exempt, guarded := m.exemptUnion(step.eip, step.service, step.vips), m.guardedUnion(step.guarded, step.served)
		wantExempt := union(union(step.eip, step.service, netip.Prefix.Compare), step.vips, netip.Prefix.Compare)
		if !slices.Equal(exempt, wantExempt) || !slices.Equal(guarded, union(step.guarded, step.served, netip.Addr.Compare)) {
			t.Errorf("%s: exempt %v guarded %v, want the unions", step.name, exempt, guarded)
		}
		if sameList(exempt, lastExempt) != step.same || sameList(guarded, lastGuarded) != step.same {
			t.Errorf("%s: the last lists handed again: %v, %v; want %v", step.name, sameList(exempt, lastExempt), sameList(guarded, lastGuarded), step.same)
		}
		lastExempt, lastGuarded = exempt, guarded
	}
}

// The nodes the replies are routed to are the pod networks' nodes in order, made again when a
// node comes or goes, and the same list while they stay (their networks may change).
func TestMergeMemoNodes(t *testing.T) {
	p := netip.MustParsePrefix
	m := &mergeMemo{}
	var last []string
	for _, step := range []struct {
		name   string
		podsOf map[string][]netip.Prefix
		want   []string
		same   bool
	}{
		{"first", map[string][]netip.Prefix{"n2": {p("10.244.2.0/24")}, "n1": {p("10.244.1.0/24")}}, []string{"n1", "n2"}, false},
		{"a network changed", map[string][]netip.Prefix{"n2": {p("10.244.9.0/24")}, "n1": {p("10.244.1.0/24")}}, []string{"n1", "n2"}, true},
		{"a node more", map[string][]netip.Prefix{"n2": nil, "n1": nil, "n0": nil}, []string{"n0", "n1", "n2"}, false},
		{"one replaced", map[string][]netip.Prefix{"n2": nil, "n1": nil, "n3": nil}, []string{"n1", "n2", "n3"}, false},
		{"none", nil, nil, false},
	} {
		got := m.nodesOf(step.podsOf)
		if !slices.Equal(got, step.want) {
			t.Errorf("%s: nodes %v, want %v", step.name, got, step.want)
		}
		if same := sameList(got, last) && len(got) > 0; same != step.same {
			t.Errorf("%s: the last list handed again %v, want %v", step.name, same, step.same)
		}
		last = got
	}
}

// An input made anew but equal to the last is compared by value once: the syncs after it find
// it by identity (an egress node compared its 5,000 nodes' networks at every sync, 2.4 ms,
// after any Node changed once).
func TestMergeMemoKeepsTheLatestEqualInput(t *testing.T) {
	var d derived[[]int, int]
	deep, made := 0, 0
	equal := func(a, b []int) bool {
		if sameList(a, b) {
			return true
		}
		deep++
		return slices.Equal(a, b)
	}
	sum := func(in []int) int {
		made++
		return len(in)
	}
	d.of([]int{1, 2}, equal, sum)
	again := []int{1, 2} // the same values in a new list
	for range 3 {
		d.of(again, equal, sum)
	}
	if made != 1 || deep != 1 {
		t.Errorf("made %d times and compared by value %d times, want 1 and 1", made, deep)
	}
}

// EgressIP's lists without what EgressServices serve are withoutServed's, the same lists while
// the part's and the served addresses stay, and made again when either changes.
func TestMergeMemoWithoutServed(t *testing.T) {
	a := netip.MustParseAddr
	eip := dataplane.Origin{Kind: "EgressIP", Name: "e"}
	part := func(pods ...string) egressip.Part {
		var p egressip.Part
		for _, pod := range pods {
			p.SNAT = append(p.SNAT, dataplane.SNAT{Origin: eip, Pod: a(pod), To: a("172.18.0.100")})
			p.Steer = append(p.Steer, cluster.Steer{Origin: eip, PodIP: a(pod), Via: []netip.Addr{a("192.0.2.2")}})
		}
		return p
	}
	m := &mergeMemo{}
	p := part("10.244.1.5", "10.244.2.5")
	var last egressip.Part
	for _, step := range []struct {
		name   string
		part   egressip.Part
		served []netip.Addr
		same   bool
	}{
		{"first", p, []netip.Addr{a("10.244.2.5")}, false},
		{"the same part, the same served", p, []netip.Addr{a("10.244.2.5")}, true},
		{"another served", p, []netip.Addr{a("10.244.1.5")}, false},
		{"a part compiled anew", part("10.244.1.5", "10.244.2.5"), []netip.Addr{a("10.244.1.5")}, false},
		{"none served", p, nil, false},
	} {
		got := m.withoutServed(step.part, step.served)
		want := withoutServed(step.part, step.served)
		if !slices.Equal(got.SNAT, want.SNAT) || len(got.Steer) != len(want.Steer) {
			t.Errorf("%s: SNAT %v, steering %v; want %v, %v", step.name, got.SNAT, got.Steer, want.SNAT, want.Steer)
		}
		for i := range got.Steer {
			if got.Steer[i].PodIP != want.Steer[i].PodIP {
				t.Errorf("%s: steering %v, want %v", step.name, got.Steer, want.Steer)
			}
		}
		if same := sameList(got.SNAT, last.SNAT) && sameList(got.Steer, last.Steer); same != step.same {
			t.Errorf("%s: the last lists handed again %v, want %v", step.name, same, step.same)
		}
		last = got
	}
}
