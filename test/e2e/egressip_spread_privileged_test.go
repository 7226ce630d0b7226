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

// TestPrivilegedEgressIPSpreadsFromAnEgressNode: an EgressIP with two addresses per family on two
// egress nodes. A selected pod on one of those egress nodes leaves with both of them, flow by
// flow, as upstream spreads a pod's flows over every egress node, its own included (a pod on a
// node that is not an egress node too); never with its pod or node address. IPv4 and IPv6.
func TestPrivilegedEgressIPSpreadsFromAnEgressNode(t *testing.T) {
	privileged.Require(t)
	e := newEIPLab(t, 3)
	a4, b4 := netip.MustParseAddr(eip4), eip4b
	a6, b6 := netip.MustParseAddr(eip6), eip6b
	name := e.egressIP(t, "spread", "spread", a4, b4, a6, b6)
	var items map[string]netip.Addr
	poll.Eventually(t, "four egress IPs placed", 20*time.Second, func() error {
		if items = e.items(t, name); len(items) < 2 {
			return fmt.Errorf("%v", egressIPItemsTB(e.Lab, name))
		}
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
	onEgress := addPod(t, e.node(e.nodeOf(t, name, a4)), e.ns, "on-egress", lab.PodOptions{Labels: map[string]string{"app": "spread"}})
	elsewhere := addPod(t, e.Nodes[0], e.ns, "elsewhere", lab.PodOptions{Labels: map[string]string{"app": "spread"}})
	for _, p := range []*lab.Pod{onEgress, elsewhere} {
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
