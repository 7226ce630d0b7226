package egressip

import (
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers/watcherstest"
)

func compileNode(t *testing.T, c *Compiler, node string, objs ...runtime.Object) Part {
	t.Helper()
	snap := watcherstest.Snapshot(objs...)
	in := &cluster.Input{Snap: snap, Node: node, Networks: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	part, err := c.Compile(in)
	if err != nil {
		t.Fatal(err)
	}
	return part
}

func clusterNode(name, primary4 string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
		cluster.PrimaryIfAddrAnnotation: `{"ipv4":"` + primary4 + `"}`}}}
}

func runningPod(ns, name, node string, labels map[string]string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

// One object with its IP on n2 selecting a pod on n1 and one on n2: n1 steers its pod to n2's
// primary address; n2 hosts the IP and SNATs both pods; an unselected pod is untouched.
func TestCompileSteersAndSNATs(t *testing.T) {
	eip := &ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "eip"}, Spec: ovnv1.EgressIPSpec{
		EgressIPs:         []ovnv1.IPAddress{"192.0.2.100"},
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
		PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
	}, Status: ovnv1.EgressIPStatus{Items: []ovnv1.EgressIPStatusItem{{Node: "n2", EgressIP: "192.0.2.100"}}}}
	objs := []runtime.Object{eip,
		clusterNode("n1", "192.0.2.1/24"), clusterNode("n2", "192.0.2.2/24"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"team": "a"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "b"}},
		runningPod("a", "p1", "n1", map[string]string{"app": "x"}, "10.244.1.5", "fd00:10:244:1::5"),
		runningPod("a", "p2", "n2", map[string]string{"app": "x"}, "10.244.2.5"),
		runningPod("a", "other", "n1", map[string]string{"app": "y"}, "10.244.1.6"),
		runningPod("b", "p3", "n1", map[string]string{"app": "x"}, "10.244.1.7"),
	}
	o := dataplane.Origin{Kind: cluster.KindEgressIP, Name: "eip"}
	n1 := compileNode(t, &Compiler{}, "n1", objs...)
	wantSteer := []cluster.Steer{{Origin: o, Pod: dataplane.Origin{Kind: cluster.KindPod, Namespace: "a", Name: "p1"},
		PodIP: netip.MustParseAddr("10.244.1.5"), Via: []netip.Addr{netip.MustParseAddr("192.0.2.2")}}}
	if !reflect.DeepEqual(n1.Steer, wantSteer) || len(n1.SNAT) != 0 || len(n1.Addresses) != 0 {
		t.Errorf("n1: steer %+v snat %+v addresses %+v, want only %+v", n1.Steer, n1.SNAT, n1.Addresses, wantSteer)
	}
	n2 := compileNode(t, &Compiler{}, "n2", objs...)
	wantSNAT := []dataplane.SNAT{{Origin: o, Pod: netip.MustParseAddr("10.244.1.5"), To: netip.MustParseAddr("192.0.2.100")},
		{Origin: o, Pod: netip.MustParseAddr("10.244.2.5"), To: netip.MustParseAddr("192.0.2.100")}}
	if !sameElements(n2.SNAT, wantSNAT) || len(n2.Steer) != 0 {
		t.Errorf("n2: snat %+v steer %+v, want snat %+v", n2.SNAT, n2.Steer, wantSNAT)
	}
	if want := []dataplane.Address{{Origin: o, Addr: netip.MustParseAddr("192.0.2.100")}}; !reflect.DeepEqual(n2.Addresses, want) {
		t.Errorf("n2 addresses %+v, want %+v", n2.Addresses, want)
	}
	// Only the IPv4 addresses are guarded: the object has no IPv6 egress IP.
	if want := []netip.Addr{netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.244.2.5")}; !sameElements(n1.Guarded, want) {
		t.Errorf("guarded %v, want %v", n1.Guarded, want)
	}
	for _, p := range []string{"10.244.0.0/16", "192.0.2.1/32", "192.0.2.2/32"} {
		if !containsPrefix(n1.Exempt, netip.MustParsePrefix(p)) {
			t.Errorf("exempt %v lacks %s", n1.Exempt, p)
		}
	}
}

// An object without status serves nobody: its pods keep the normal path.
func TestCompileUnassignedServesNobody(t *testing.T) {
	eip := &ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "eip"}, Spec: ovnv1.EgressIPSpec{EgressIPs: []ovnv1.IPAddress{"192.0.2.100"}}}
	part := compileNode(t, &Compiler{}, "n1", eip, clusterNode("n1", "192.0.2.1/24"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, runningPod("a", "p1", "n1", nil, "10.244.1.5"))
	if len(part.Steer)+len(part.SNAT)+len(part.Guarded) != 0 || part.Assigned {
		t.Errorf("unassigned object compiled %+v", part)
	}
}

// An EgressIP assigned to another node makes every node's part Assigned, also one that knows
// none of the pods it selects: packets may be steered to any node that served them a moment ago.
func TestCompileAssignedAnywhere(t *testing.T) {
	eip := &ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "eip"}, Spec: ovnv1.EgressIPSpec{EgressIPs: []ovnv1.IPAddress{"192.0.2.100"}},
		Status: ovnv1.EgressIPStatus{Items: []ovnv1.EgressIPStatusItem{{Node: "n2", EgressIP: "192.0.2.100"}}}}
	part := compileNode(t, &Compiler{}, "n1", eip, clusterNode("n1", "192.0.2.1/24"), clusterNode("n2", "192.0.2.2/24"))
	if !part.Assigned || len(part.Guarded) != 0 {
		t.Errorf("node n1, no pod known: Assigned %v, Guarded %v; want assigned, nothing guarded", part.Assigned, part.Guarded)
	}
}

func sameElements[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	count := map[T]int{}
	for _, x := range a {
		count[x]++
	}
	for _, x := range b {
		count[x]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}

func containsPrefix(ps []netip.Prefix, p netip.Prefix) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// A status item whose address the spec does not request (written by someone else than the
// leader, or left after a spec change) is not served: no address, no SNAT to it.
func TestCompileServesOnlyRequestedAddresses(t *testing.T) {
	e := eip("eip", 0, []string{"192.0.2.100"}, "192.0.2.100@n1", "192.0.2.200@n1")
	part := compileNode(t, &Compiler{}, "n1", e, clusterNode("n1", "192.0.2.1/24"))
	var got []netip.Addr
	for _, a := range part.Addresses {
		got = append(got, a.Addr)
	}
	if want := []netip.Addr{netip.MustParseAddr("192.0.2.100")}; !reflect.DeepEqual(got, want) {
		t.Errorf("addresses of n1: %v, want %v (192.0.2.200 is not requested)", got, want)
	}
}

// Two egress IPs on n1 and n2: a pod on n1, an egress node, leaves from n1 (SNAT) and through n2
// (steered), flow by flow, one in two here, as upstream spreads it; a pod on n3 is steered to both.
func TestCompileSpreadsAPodOnAnEgressNode(t *testing.T) {
	eip := &ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "eip"}, Spec: ovnv1.EgressIPSpec{
		EgressIPs:         []ovnv1.IPAddress{"192.0.2.100", "192.0.2.101"},
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
	}, Status: ovnv1.EgressIPStatus{Items: []ovnv1.EgressIPStatusItem{{Node: "n1", EgressIP: "192.0.2.100"}, {Node: "n2", EgressIP: "192.0.2.101"}}}}
	objs := []runtime.Object{eip,
		clusterNode("n1", "192.0.2.1/24"), clusterNode("n2", "192.0.2.2/24"), clusterNode("n3", "192.0.2.3/24"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"team": "a"}}},
		runningPod("a", "p1", "n1", nil, "10.244.1.5"),
		runningPod("a", "p3", "n3", nil, "10.244.3.5"),
	}
	o := dataplane.Origin{Kind: cluster.KindEgressIP, Name: "eip"}
	n1 := compileNode(t, &Compiler{}, "n1", objs...)
	wantSteer := []cluster.Steer{{Origin: o, Pod: dataplane.Origin{Kind: cluster.KindPod, Namespace: "a", Name: "p1"},
		PodIP: netip.MustParseAddr("10.244.1.5"), Via: []netip.Addr{netip.MustParseAddr("192.0.2.2")}, Spread: 2}}
	if !reflect.DeepEqual(n1.Steer, wantSteer) {
		t.Errorf("n1: steer %+v, want %+v", n1.Steer, wantSteer)
	}
	wantSNAT := []dataplane.SNAT{{Origin: o, Pod: netip.MustParseAddr("10.244.1.5"), To: netip.MustParseAddr("192.0.2.100")},
		{Origin: o, Pod: netip.MustParseAddr("10.244.3.5"), To: netip.MustParseAddr("192.0.2.100")}}
	if !sameElements(n1.SNAT, wantSNAT) {
		t.Errorf("n1: snat %+v, want %+v", n1.SNAT, wantSNAT)
	}
	n3 := compileNode(t, &Compiler{}, "n3", objs...)
	if len(n3.Steer) != 1 || n3.Steer[0].Spread != 0 || len(n3.Steer[0].Via) != 2 {
		t.Errorf("n3: steer %+v, want p3 to both egress nodes, unspread", n3.Steer)
	}
}
