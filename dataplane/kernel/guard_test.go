package kernel

import (
	"bytes"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/classifier"
)

// testLinks is a linkSet as facings.links builds it from a list of interfaces.
func testLinks(links ...netlink.Link) *linkSet {
	m := map[int]netlink.Link{}
	for _, l := range links {
		m[l.Attrs().Index] = l
	}
	return newLinkSet(m)
}

func veth(name string, index, master int) *netlink.Veth {
	return &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, Index: index, MasterIndex: master}}
}

func bridge(name string, index int) *netlink.Bridge {
	return &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, Index: index}}
}

func testAttach(log *bytes.Buffer) *attachFacility {
	return &attachFacility{unguardedSaid: map[string]string{}, log: slog.New(slog.NewTextHandler(log, nil))}
}

// TestGuardableFacesPodsAlone: the classifier checks the sources of a pod's veth and of a
// bridge whose every port is a veth; a bridge with another port (the uplink enslaved to share
// the LAN), another kind of interface, and an interface renamed or gone since the sync began
// are not guarded, as their sources are not all pods'.
func TestGuardableFacesPodsAlone(t *testing.T) {
	ls := testLinks(
		veth("pod0", 10, 0),
		bridge("cni0", 20), veth("vethA", 21, 20), veth("vethB", 22, 20),
		bridge("br-lan", 30), veth("vethC", 31, 30), &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "eth0", Index: 32, MasterIndex: 30}},
		&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "dummy0", Index: 40}},
		bridge("empty0", 50),
	)
	for _, tc := range []struct {
		name string
		want map[string]int
		got  []int
	}{
		{"a pod's veth", map[string]int{"pod0": 10}, []int{10}},
		{"a bridge of veths", map[string]int{"cni0": 20}, []int{20}},
		{"a bridge without ports yet", map[string]int{"empty0": 50}, []int{50}},
		{"a bridge with the uplink", map[string]int{"br-lan": 30}, nil},
		{"a dummy", map[string]int{"dummy0": 40}, nil},
		{"renamed since", map[string]int{"pod1": 10}, nil},
		{"gone since", map[string]int{"pod9": 99}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := testAttach(&bytes.Buffer{}).guardable(tc.want, ls)
			if !slices.Equal(got, tc.got) {
				t.Errorf("guarded %v, want %v", got, tc.got)
			}
		})
	}
}

// TestUnguardedSaysOnce: an interface whose sources are not checked is logged with why, once
// per sync after sync, and again only when the reason changes.
func TestUnguardedSaysOnce(t *testing.T) {
	var log bytes.Buffer
	a := testAttach(&log)
	ls := testLinks(bridge("br-lan", 30), &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "eth0", Index: 32, MasterIndex: 30}})
	want := map[string]int{"br-lan": 30}
	a.guardable(want, ls)
	a.guardable(want, ls)
	if n := strings.Count(log.String(), "interface=br-lan"); n != 1 {
		t.Fatalf("said %d times, want once:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), `why="bridge port eth0 is a device, not a pod's veth"`) {
		t.Errorf("the log does not say why:\n%s", log.String())
	}
	// The uplink leaves, a tunnel joins: a new reason, said again.
	ls = testLinks(bridge("br-lan", 30), &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "vx0", Index: 33, MasterIndex: 30}})
	a.guardable(want, ls)
	if n := strings.Count(log.String(), "interface=br-lan"); n != 2 || !strings.Contains(log.String(), "bridge port vx0 is a vxlan") {
		t.Errorf("a new reason was not said (%d lines):\n%s", n, log.String())
	}
}

// TestPortOf: a bridged pod's address is behind the bridge port among its CNI-reported host
// interfaces; without one (a restarted agent that did not see its ADD), behind the port it was
// written with while that is still a veth of the bridge; else unknown.
func TestPortOf(t *testing.T) {
	ls := testLinks(bridge("cni0", 20), veth("vethA", 21, 20), veth("vethB", 22, 20),
		bridge("cni1", 30), veth("vethC", 31, 30), veth("loose", 40, 0),
		&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "dum", Index: 23, MasterIndex: 20}})
	for _, tc := range []struct {
		name    string
		host    []string
		written int
		want    int
	}{
		{"its host veth", []string{"eth-in-pod", "vethB"}, 21, 22},
		{"written, no ADD seen", nil, 21, 21},
		{"host veth on another bridge, written kept", []string{"vethC"}, 22, 22},
		{"written port moved to another bridge", nil, 31, 0},
		{"written port not enslaved", nil, 40, 0},
		{"written port not a veth", []string{"dum"}, 23, 0},
		{"nothing known", nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ls.portOf(20, tc.host, tc.written); got != tc.want {
				t.Errorf("port %d, want %d", got, tc.want)
			}
		})
	}
}

// TestPortsOfBridgedPods: the classifier learns the bridge port of each address facing a
// bridge, and of none facing a veth directly, a VRF whose slave is the pod's veth (the port
// guard is for bridges), or whose port is unknown.
func TestPortsOfBridgedPods(t *testing.T) {
	bridged, routed, unknown := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.0.3")
	inVRF := netip.MustParseAddr("10.0.2.2")
	s := &dataplane.State{Classifier: dataplane.ClassifierState{Pods: []dataplane.Pod{
		{IPs: []netip.Addr{bridged}, HostInterfaces: []string{"vethA"}},
		{IPs: []netip.Addr{routed}, HostInterfaces: []string{"pod0"}},
		{IPs: []netip.Addr{unknown}},
		{IPs: []netip.Addr{inVRF}, HostInterfaces: []string{"vethV"}},
	}}}
	f := faced{
		byAddr: map[netip.Addr]facing{bridged: {"cni0", 20}, routed: {"pod0", 10}, unknown: {"cni0", 20}, inVRF: {"vrf-pods", 60}},
		ports:  map[netip.Addr]int{},
		links: testLinks(bridge("cni0", 20), veth("vethA", 21, 20), veth("pod0", 10, 0),
			&netlink.Vrf{LinkAttrs: netlink.LinkAttrs{Name: "vrf-pods", Index: 60}}, veth("vethV", 61, 60)),
	}
	(&classifierFacility{classifier: &classifier.Classifier{}}).ports(s, &f)
	if want := map[netip.Addr]int{bridged: 21}; !maps.Equal(f.ports, want) {
		t.Errorf("ports %v, want %v", f.ports, want)
	}
}

// TestGuardsForBridgePorts: the port guard goes on every port of a guarded bridge, each port
// a pod is known behind is claimed (once, however many addresses the pod has) with the pods
// to blame should guarding it fail; the ports of an unguarded bridge get nothing.
func TestGuardsForBridgePorts(t *testing.T) {
	a4, a6, b, c := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2"), netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.1.0.2")
	podA, podB, podC := dataplane.Origin{Kind: "Pod", Name: "a"}, dataplane.Origin{Kind: "Pod", Name: "b"}, dataplane.Origin{Kind: "Pod", Name: "c"}
	s := &dataplane.State{Classifier: dataplane.ClassifierState{Pods: []dataplane.Pod{
		{Origin: podA, IPs: []netip.Addr{a4, a6}}, {Origin: podB, IPs: []netip.Addr{b}}, {Origin: podC, IPs: []netip.Addr{c}},
	}}}
	f := faced{
		byAddr: map[netip.Addr]facing{a4: {"cni0", 20}, a6: {"cni0", 20}, b: {"cni0", 20}, c: {"br-lan", 30}},
		ports:  map[netip.Addr]int{a4: 21, a6: 21, c: 31},
		links: testLinks(bridge("cni0", 20), veth("vethA", 21, 20), veth("vethB", 22, 20),
			bridge("br-lan", 30), veth("vethC", 31, 30), &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "eth0", Index: 32, MasterIndex: 30}}),
	}
	g := testAttach(&bytes.Buffer{}).guardsFor(s, f, map[string]int{"cni0": 20, "br-lan": 30})
	if !slices.Equal(g.interfaces, []int{20}) {
		t.Errorf("guarded interfaces %v, want cni0's alone", g.interfaces)
	}
	if want := map[string]int{"vethA": 21, "vethB": 22}; !maps.Equal(g.ports, want) {
		t.Errorf("port guards %v, want %v", g.ports, want)
	}
	if !slices.Equal(g.claimed, []int{21}) || !slices.Equal(slices.Compact(g.owners[21]), []dataplane.Origin{podA}) || len(g.owners) != 1 {
		t.Errorf("claimed %v with owners %v, want vethA's, pod a's", g.claimed, g.owners)
	}
	if g := testAttach(&bytes.Buffer{}).guardsFor(s, faced{}, map[string]int{"cni0": 20}); g != nil {
		t.Errorf("guards %+v without the list of interfaces, want none", g)
	}
}
