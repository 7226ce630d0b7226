package egressip

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// node is a labeled, Ready, reachable node whose primary interface has the given addresses
// (one per family), which are also its host CIDRs.
func node(name string, primary ...string) Node {
	n := Node{Name: name, Labeled: true, Ready: true, Reachable: true}
	for _, s := range primary {
		p := netip.MustParsePrefix(s)
		if p.Addr().Is4() {
			n.Primary.V4 = p
		} else {
			n.Primary.V6 = p
		}
		n.HostCIDRs = append(n.HostCIDRs, p)
	}
	return n
}

func (n Node) with(f func(*Node)) Node { f(&n); return n }

func unlabeled(n *Node)   { n.Labeled = false }
func notReady(n *Node)    { n.Ready = false }
func unreachable(n *Node) { n.Reachable = false }

// cloud puts the node in cloud mode with one IPv4 subnet and capacities (total, IPv4).
func cloud(subnet string, total, v4 int) func(*Node) {
	return func(n *Node) {
		n.Cloud = &CloudConfig{V4: netip.MustParsePrefix(subnet), Capacity: Capacity{IP: total, IPv4: v4, IPv6: unlimited}}
	}
}

func secondary(cidrs ...string) func(*Node) {
	return func(n *Node) {
		for _, c := range cidrs {
			n.HostCIDRs = append(n.HostCIDRs, netip.MustParsePrefix(c))
		}
	}
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// eip is an EgressIP created `age` minutes after epoch, whose status entries are "ip@node".
func eip(name string, age int, ips []string, status ...string) *ovnv1.EgressIP {
	e := &ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(age) * time.Minute))}}
	for _, ip := range ips {
		e.Spec.EgressIPs = append(e.Spec.EgressIPs, ovnv1.IPAddress(ip))
	}
	e.Status.Items = items(status...)
	return e
}

func items(status ...string) []ovnv1.EgressIPStatusItem {
	var out []ovnv1.EgressIPStatusItem
	for _, s := range status {
		ip, node, _ := strings.Cut(s, "@")
		out = append(out, ovnv1.EgressIPStatusItem{Node: node, EgressIP: ip})
	}
	return out
}

func ips(s ...string) []string { return s }

// want is the expected decision for one object; unassigned entries are "ip Reason".
type want struct {
	items            []string
	changed, pending bool
	unassigned       []string
}

func summarize(a Assignment) want {
	w := want{changed: a.Changed, pending: a.Pending}
	for _, it := range a.Items {
		w.items = append(w.items, it.EgressIP+"@"+it.Node)
	}
	for _, u := range a.Unassigned {
		w.unassigned = append(w.unassigned, u.IP+" "+u.Reason)
	}
	return w
}

func eventStrings(evs []Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%s %s %s: %s", e.Type, e.EgressIP, e.Reason, e.Message))
	}
	return out
}

var (
	n1 = node("n1", "10.0.0.1/24")
	n2 = node("n2", "10.0.0.2/24")
	n3 = node("n3", "10.0.0.3/24")
)

func TestAssign(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nodes  []Node
		eips   []*ovnv1.EgressIP
		want   map[string]want
		events []string
	}{{
		name:  "new object: one IP per node, equal loads broken by node name",
		nodes: []Node{n3, n2, n1},
		eips:  []*ovnv1.EgressIP{eip("a", 0, ips("10.0.0.100", "10.0.0.101"))},
		want:  map[string]want{"a": {items: []string{"10.0.0.100@n1", "10.0.0.101@n2"}, changed: true}},
	}, {
		name:  "least loaded node first, all objects' IPs counted",
		nodes: []Node{n1, n2, n3},
		eips: []*ovnv1.EgressIP{
			eip("old", 0, ips("10.0.0.50", "10.0.0.51"), "10.0.0.50@n1", "10.0.0.51@n2"),
			eip("older", -1, ips("10.0.0.60"), "10.0.0.60@n1"),
			eip("new", 5, ips("10.0.0.100", "10.0.0.101")),
		},
		want: map[string]want{
			"older": {items: []string{"10.0.0.60@n1"}},
			"old":   {items: []string{"10.0.0.50@n1", "10.0.0.51@n2"}},
			"new":   {items: []string{"10.0.0.100@n3", "10.0.0.101@n2"}, changed: true},
		},
	}, {
		name:  "node loses its label: its IP moves to the least loaded other node",
		nodes: []Node{n1.with(unlabeled), n2, n3},
		eips: []*ovnv1.EgressIP{
			eip("a", 0, ips("10.0.0.100", "10.0.0.101"), "10.0.0.100@n1", "10.0.0.101@n2"),
			eip("b", 1, ips("10.0.0.110"), "10.0.0.110@n2"),
		},
		want: map[string]want{
			"a": {items: []string{"10.0.0.101@n2", "10.0.0.100@n3"}, changed: true},
			"b": {items: []string{"10.0.0.110@n2"}},
		},
	}, {
		name:  "node not Ready: its IP moves",
		nodes: []Node{n1, n2.with(notReady), n3},
		eips:  []*ovnv1.EgressIP{eip("a", 0, ips("10.0.0.100", "10.0.0.101"), "10.0.0.100@n1", "10.0.0.101@n2")},
		want:  map[string]want{"a": {items: []string{"10.0.0.100@n1", "10.0.0.101@n3"}, changed: true}},
	}, {
		name:  "node unreachable: its IP moves",
		nodes: []Node{n1, n2, n3.with(unreachable)},
		eips:  []*ovnv1.EgressIP{eip("a", 0, ips("10.0.0.100"), "10.0.0.100@n3")},
		want:  map[string]want{"a": {items: []string{"10.0.0.100@n1"}, changed: true}},
	}, {
		name:   "node gone from the cluster, or without its primary interface annotation: its IP moves",
		nodes:  []Node{n2.with(func(n *Node) { n.Primary = cluster.PrimaryIfAddr{} }), n3},
		eips:   []*ovnv1.EgressIP{eip("a", 0, ips("10.0.0.100", "10.0.0.101"), "10.0.0.100@n1", "10.0.0.101@n2")},
		want:   map[string]want{"a": {items: []string{"10.0.0.100@n3"}, changed: true, unassigned: []string{"10.0.0.101 NoMatchingNodeFound"}}},
		events: []string{"Warning a UnassignedRequest: Not all egress IPs for EgressIP: a could be assigned, please tag more nodes"},
	}, {
		name:  "node returns: no rebalancing, nothing written",
		nodes: []Node{n1, n2, n3},
		eips:  []*ovnv1.EgressIP{eip("a", 0, ips("10.0.0.100", "10.0.0.101"), "10.0.0.100@n2", "10.0.0.101@n3")},
		want:  map[string]want{"a": {items: []string{"10.0.0.100@n2", "10.0.0.101@n3"}}},
	}, {
		name:  "status from a previous leader is kept although this leader would have chosen otherwise",
		nodes: []Node{n1, n2, n3},
		eips: []*ovnv1.EgressIP{
			eip("a", 0, ips("10.0.0.100", "10.0.0.101"), "10.0.0.101@n3", "10.0.0.100@n2"),
			eip("b", 1, ips("10.0.0.110"), "10.0.0.110@n3"),
		},
		want: map[string]want{
			"a": {items: []string{"10.0.0.101@n3", "10.0.0.100@n2"}},
			"b": {items: []string{"10.0.0.110@n3"}},
		},
	}, {
		name:  "two objects request the same free IP: the older one gets it",
		nodes: []Node{n1, n2},
		eips:  []*ovnv1.EgressIP{eip("young", 9, ips("10.0.0.100")), eip("old", 1, ips("10.0.0.100"))},
		want: map[string]want{
			"old":   {items: []string{"10.0.0.100@n1"}, changed: true},
			"young": {unassigned: []string{"10.0.0.100 UnsupportedRequest"}},
		},
		events: []string{
			`Warning young UnsupportedRequest: IP: "10.0.0.100" for EgressIP: young is already allocated for EgressIP: old on n1`,
			"Warning young NoMatchingNodeFound: No matching nodes found, which can host any of the egress IPs: [10.0.0.100] for object EgressIP: young",
		},
	}, {
		name:  "an IP held in status stays with its holder even when an older object requests it",
		nodes: []Node{n1, n2},
		eips:  []*ovnv1.EgressIP{eip("young", 9, ips("10.0.0.100"), "10.0.0.100@n2"), eip("old", 1, ips("10.0.0.100", "10.0.0.101"))},
		want: map[string]want{
			"old":   {items: []string{"10.0.0.101@n1"}, changed: true, unassigned: []string{"10.0.0.100 UnsupportedRequest"}},
			"young": {items: []string{"10.0.0.100@n2"}},
		},
		events: []string{
			`Warning old UnsupportedRequest: IP: "10.0.0.100" for EgressIP: old is already allocated for EgressIP: young on n2`,
			"Warning old UnassignedRequest: Not all egress IPs for EgressIP: old could be assigned, please tag more nodes",
		},
	}, {
		name: "an IP equal to a node's address (host-cidrs or status address) is a conflict",
		nodes: []Node{n1, n2.with(secondary("192.168.126.51/24")),
			node("n3", "10.0.1.3/24").with(func(n *Node) { n.Labeled = false; n.Addresses = []netip.Addr{netip.MustParseAddr("10.0.0.77")} })},
		eips: []*ovnv1.EgressIP{eip("egressip", 0, ips("192.168.126.51")), eip("b", 1, ips("10.0.0.77", "10.0.0.1"))},
		want: map[string]want{
			"egressip": {unassigned: []string{"192.168.126.51 EgressIPConflict"}},
			"b":        {unassigned: []string{"10.0.0.77 EgressIPConflict", "10.0.0.1 EgressIPConflict"}},
		},
		events: []string{
			"Warning egressip EgressIPConflict: Egress IP egressip with IP 192.168.126.51 is conflicting with a host (n2) IP address and will not be assigned",
			"Warning egressip NoMatchingNodeFound: No matching nodes found, which can host any of the egress IPs: [192.168.126.51] for object EgressIP: egressip",
			"Warning b EgressIPConflict: Egress IP b with IP 10.0.0.77 is conflicting with a host (n3) IP address and will not be assigned",
			"Warning b EgressIPConflict: Egress IP b with IP 10.0.0.1 is conflicting with a host (n1) IP address and will not be assigned",
			"Warning b NoMatchingNodeFound: No matching nodes found, which can host any of the egress IPs: [10.0.0.77 10.0.0.1] for object EgressIP: b",
		},
	}, {
		name:  "IPv6 and dual stack: each IP goes where its family's network is, written canonically",
		nodes: []Node{node("n1", "10.0.0.1/24"), node("n2", "10.0.0.2/24", "fd00::2/64"), node("n3", "fd00::3/64")},
		eips:  []*ovnv1.EgressIP{eip("a", 0, ips("FD00::0064", "::ffff:10.0.0.100", "fd00::2:1"))},
		want:  map[string]want{"a": {items: []string{"fd00::64@n2", "10.0.0.100@n1", "fd00::2:1@n3"}, changed: true}},
	}, {
		name: "secondary host network: only nodes on it are candidates, even against a less loaded node's primary subnet",
		nodes: []Node{
			node("n1", "172.16.0.1/16"),
			node("n2", "10.0.0.2/24").with(secondary("172.16.9.2/24", "169.254.0.2/16")),
			node("n3", "10.0.0.3/24").with(secondary("172.16.9.3/24")),
			node("n4", "10.0.0.4/24").with(secondary("169.254.0.4/16")),
		},
		eips: []*ovnv1.EgressIP{
			eip("busy", 0, ips("10.0.0.50"), "10.0.0.50@n2"),
			eip("a", 1, ips("172.16.9.100", "169.254.0.100", "172.16.0.100")),
		},
		want: map[string]want{
			"busy": {items: []string{"10.0.0.50@n2"}},
			// 172.16.9.100: n2 and n3 host it on a secondary network, n1 on its primary: only
			// n2 and n3 count, n3 is less loaded. 169.254.0.100: link-local host networks
			// host nothing. 172.16.0.100: n1's primary network only.
			"a": {items: []string{"172.16.9.100@n3", "172.16.0.100@n1"}, changed: true, unassigned: []string{"169.254.0.100 NoMatchingNodeFound"}},
		},
		events: []string{"Warning a UnassignedRequest: Not all egress IPs for EgressIP: a could be assigned, please tag more nodes"},
	}, {
		name: "cloud: only the cloud subnet hosts IPs (not the primary nor secondary networks), within each node's capacity",
		nodes: []Node{
			n1.with(cloud("10.0.0.0/24", unlimited, 1)), // one IPv4 slot, taken below
			n2.with(cloud("10.0.0.0/24", 1, unlimited)), // one slot in total
			n3.with(cloud("10.0.0.0/24", unlimited, unlimited)),
			node("n4", "172.16.0.4/16").with(secondary("10.0.0.4/24")).with(cloud("192.168.0.0/24", unlimited, unlimited)),
		},
		eips: []*ovnv1.EgressIP{
			eip("held", 0, ips("10.0.0.50"), "10.0.0.50@n1"),
			eip("a", 1, ips("10.0.0.100", "10.0.0.101", "10.0.0.102", "172.16.0.100")),
		},
		want: map[string]want{
			"held": {items: []string{"10.0.0.50@n1"}},
			// n1 and n2 are full after one IP each (n1 holds one, n2 takes one); n4's primary
			// and secondary networks do not count in cloud mode.
			"a": {items: []string{"10.0.0.100@n2", "10.0.0.101@n3"}, changed: true,
				unassigned: []string{"10.0.0.102 NoMatchingNodeFound", "172.16.0.100 NoMatchingNodeFound"}},
		},
		events: []string{"Warning a UnassignedRequest: Not all egress IPs for EgressIP: a could be assigned, please tag more nodes"},
	}, {
		name:   "cloud: a node without the cloud's annotation is not assignable",
		nodes:  []Node{n1.with(func(n *Node) { n.Cloud = &CloudConfig{} })},
		eips:   []*ovnv1.EgressIP{eip("a", 0, ips("10.0.0.100"))},
		want:   map[string]want{"a": {unassigned: []string{"10.0.0.100 NoMatchingNodeFound"}}},
		events: []string{"Warning a NoMatchingNodeFound: no assignable nodes for EgressIP: a, please tag at least one node with label: k8s.ovn.org/egress-assignable"},
	}, {
		name:   "more IPs than nodes: one IP of an object per node",
		nodes:  []Node{n1, n2},
		eips:   []*ovnv1.EgressIP{eip("a", 0, ips("10.0.0.100", "10.0.0.101", "10.0.0.102"))},
		want:   map[string]want{"a": {items: []string{"10.0.0.100@n1", "10.0.0.101@n2"}, changed: true, unassigned: []string{"10.0.0.102 NoMatchingNodeFound"}}},
		events: []string{"Warning a UnassignedRequest: Not all egress IPs for EgressIP: a could be assigned, please tag more nodes"},
	}, {
		name:  "two IPs of one object on one node: both entries are invalid and placed again",
		nodes: []Node{n1, n2},
		eips:  []*ovnv1.EgressIP{eip("a", 0, ips("10.0.0.100", "10.0.0.101"), "10.0.0.100@n1", "10.0.0.101@n1")},
		want:  map[string]want{"a": {items: []string{"10.0.0.100@n1", "10.0.0.101@n2"}, changed: true}},
	}, {
		name:   "no assignable node",
		nodes:  []Node{n1.with(unlabeled), n2.with(unreachable)},
		eips:   []*ovnv1.EgressIP{eip("a", 0, ips("10.0.0.100"))},
		want:   map[string]want{"a": {unassigned: []string{"10.0.0.100 NoMatchingNodeFound"}}},
		events: []string{"Warning a NoMatchingNodeFound: no assignable nodes for EgressIP: a, please tag at least one node with label: k8s.ovn.org/egress-assignable"},
	}, {
		name:   "no node has a network for the IP",
		nodes:  []Node{n1, n2},
		eips:   []*ovnv1.EgressIP{eip("a", 0, ips("192.0.2.10"))},
		want:   map[string]want{"a": {unassigned: []string{"192.0.2.10 NoMatchingNodeFound"}}},
		events: []string{"Warning a NoMatchingNodeFound: No matching nodes found, which can host any of the egress IPs: [192.0.2.10] for object EgressIP: a"},
	}, {
		name:  "a node's host CIDRs change: an IP on a secondary network it lost moves",
		nodes: []Node{n1, n2.with(secondary("172.16.0.2/16"))},
		eips:  []*ovnv1.EgressIP{eip("a", 0, ips("172.16.0.100"), "172.16.0.100@n1")},
		want:  map[string]want{"a": {items: []string{"172.16.0.100@n2"}, changed: true}},
	}, {
		name:   "an invalid IP: the object is left as it is, and its entries still hold their IPs",
		nodes:  []Node{n1, n2},
		eips:   []*ovnv1.EgressIP{eip("bad", 0, ips("10.0.0.100", "10.0.0.300"), "10.0.0.100@n1"), eip("b", 1, ips("10.0.0.100"))},
		want:   map[string]want{"bad": {items: []string{"10.0.0.100@n1"}, unassigned: []string{"10.0.0.300 InvalidEgressIP"}}, "b": {unassigned: []string{"10.0.0.100 UnsupportedRequest"}}},
		events: []string{"Warning bad InvalidEgressIP: egress IP: 10.0.0.300 for object EgressIP: bad is not a valid IP address", `Warning b UnsupportedRequest: IP: "10.0.0.100" for EgressIP: b is already allocated for EgressIP: bad on n1`, "Warning b NoMatchingNodeFound: No matching nodes found, which can host any of the egress IPs: [10.0.0.100] for object EgressIP: b"},
	}, {
		name:  "removals before additions: an IP replaced in the spec is removed first, the new one waits",
		nodes: []Node{n1, n2},
		eips:  []*ovnv1.EgressIP{eip("a", 0, ips("10.0.0.101"), "10.0.0.100@n1")},
		want:  map[string]want{"a": {changed: true, pending: true}},
	}, {
		name:  "removals before additions: a moved IP is placed in the same write, an added one waits",
		nodes: []Node{n1.with(notReady), n2, n3},
		eips:  []*ovnv1.EgressIP{eip("a", 0, ips("10.0.0.100", "10.0.0.101"), "10.0.0.100@n1")},
		want:  map[string]want{"a": {items: []string{"10.0.0.100@n2"}, changed: true, pending: true}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			plan := Assign(tc.eips, tc.nodes)
			got := map[string]want{}
			for _, a := range plan.Assignments {
				got[a.Name] = summarize(a)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("assignments\n got %+v\nwant %+v", got, tc.want)
			}
			if evs := eventStrings(plan.Events); !reflect.DeepEqual(evs, tc.events) {
				t.Errorf("events\n got %q\nwant %q", evs, tc.events)
			}
		})
	}
}

// TestAssignConverges runs the leader's loop: write what changed, run again. Removals come
// first, the additions they held back follow, and then nothing changes any more.
func TestAssignConverges(t *testing.T) {
	nodes := []Node{n1, n2, n3}
	eips := []*ovnv1.EgressIP{
		eip("a", 0, ips("10.0.0.101", "10.0.0.102"), "10.0.0.100@n1", "10.0.0.101@n2"),
		eip("b", 1, ips("10.0.0.110"), "10.0.0.110@n2"),
	}
	var writes []string
	for run := 0; run < 5; run++ {
		plan := Assign(eips, nodes)
		changed := false
		for _, a := range plan.Assignments {
			if !a.Changed {
				continue
			}
			changed = true
			w := summarize(a)
			writes = append(writes, fmt.Sprintf("%s=%v pending=%v", a.Name, w.items, a.Pending))
			for _, e := range eips {
				if e.Name == a.Name {
					e.Status.Items = a.Items
				}
			}
		}
		if !changed {
			break
		}
	}
	want := []string{"a=[10.0.0.101@n2] pending=true", "a=[10.0.0.101@n2 10.0.0.102@n1] pending=false"}
	if !reflect.DeepEqual(writes, want) {
		t.Errorf("writes\n got %q\nwant %q", writes, want)
	}
}

// TestAssignDoesNotModifyInput: the objects come from informer caches, which must not change.
func TestAssignDoesNotModifyInput(t *testing.T) {
	e := eip("a", 0, ips("10.0.0.100", "10.0.0.101"), "10.0.0.100@n9")
	before := e.DeepCopy()
	nodes := []Node{n2, n1}
	Assign([]*ovnv1.EgressIP{e}, nodes)
	if !reflect.DeepEqual(e, before) || nodes[0].Name != "n2" {
		t.Errorf("input modified: %+v %v", e, nodes)
	}
}
