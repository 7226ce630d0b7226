package e2e

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressIPSpreadsFromAnEgressNode: an EgressIP with two addresses per family, each
// on its own egress node (upstream places one address of an object per node). A selected pod on
// an egress node of a family leaves with both of that family's addresses, flow by flow, as
// upstream spreads a pod's flows over every egress node, its own included (as a pod on a node
// that is no egress node does); never with its pod or node address. IPv4 and IPv6.
func TestPrivilegedEgressIPSpreadsFromAnEgressNode(t *testing.T) {
	privileged.Require(t)
	e := newEIPLab(t, 5)
	a4, b4 := netip.MustParseAddr(eip4), eip4b
	a6, b6 := netip.MustParseAddr(eip6), eip6b
	name := e.egressIP(t, "spread", "spread", a4, b4, a6, b6)
	poll.Eventually(t, "four egress IPs placed", 20*time.Second, func() error {
		if got := egressIPItemsTB(e.Lab, name); len(got) != 4 {
			return fmt.Errorf("%v", got)
		}
		return nil
	})
	for _, pair := range [][2]netip.Addr{{a4, b4}, {a6, b6}} {
		if na, nb := e.nodeOf(t, name, pair[0]), e.nodeOf(t, name, pair[1]); na == nb || na == "" {
			t.Fatalf("%s and %s both on %q: want them on the two egress nodes (%v)", pair[0], pair[1], na, egressIPItemsTB(e.Lab, name))
		}
	}
	spread := lab.PodOptions{Labels: map[string]string{"app": "spread"}}
	on4 := addPod(t, e.node(e.nodeOf(t, name, a4)), e.ns, "on-egress4", spread)
	on6 := addPod(t, e.node(e.nodeOf(t, name, a6)), e.ns, "on-egress6", spread)
	elsewhere := addPod(t, e.Nodes[0], e.ns, "elsewhere", spread)
	for _, p := range []*lab.Pod{on4, on6, elsewhere} {
		for _, c := range []struct {
			dst  string
			want []netip.Addr
		}{{webAddr(web4), []netip.Addr{a4, b4}}, {webAddr(web6), []netip.Addr{a6, b6}}} {
			// The first flows may predate the steering of a new pod: wait for an egress IP.
			poll.Eventually(t, p.Name+" leaves with an egress IP", 10*time.Second, func() error {
				if r := p.TCP(c.dst, lab.ClientOptions{Timeout: quick}); r.Outcome != lab.OK || !slices.Contains(c.want, r.Seen.Src) {
					return fmt.Errorf("%s", r)
				}
				return nil
			})
			seen := map[netip.Addr]int{}
			for range 40 {
				r := p.TCP(c.dst, lab.ClientOptions{Timeout: quick})
				if r.Outcome != lab.OK {
					t.Errorf("%s (%s) -> %s: %s", p.Name, p.Node.Name, c.dst, r)
					continue
				}
				seen[r.Seen.Src]++
			}
			if got := slices.SortedFunc(maps.Keys(seen), netip.Addr.Compare); !slices.Equal(got, c.want) {
				t.Errorf("%s (%s) -> %s: 40 connections left with %v, want both of %v", p.Name, p.Node.Name, c.dst, seen, c.want)
			}
		}
	}
}
