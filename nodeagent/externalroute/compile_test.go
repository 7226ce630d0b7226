package externalroute

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

func compile(t *testing.T, c *Compiler, objs ...runtime.Object) Part {
	t.Helper()
	snap := watcherstest.Snapshot(objs...)
	pods, err := cluster.LocalPods(snap, "n1")
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.Compile(&cluster.Input{Snap: snap, Node: "n1", Pods: pods})
	if err != nil {
		t.Fatal(err)
	}
	return part
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func pod(ns, name, node string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

// policy targets namespaces labelled team=<team>; created is its age rank.
func policy(name, team string, created int, static ...string) *ovnv1.AdminPolicyBasedExternalRoute {
	p := &ovnv1.AdminPolicyBasedExternalRoute{ObjectMeta: metav1.ObjectMeta{Name: name,
		CreationTimestamp: metav1.NewTime(time.Unix(int64(1000+created), 0))}}
	p.Spec.From.NamespaceSelector.MatchLabels = map[string]string{"team": team}
	for _, ip := range static {
		bfd := strings.HasSuffix(ip, "+bfd")
		p.Spec.NextHops.StaticHops = append(p.Spec.NextHops.StaticHops, &ovnv1.StaticHop{IP: ovnv1.IPAddress(strings.TrimSuffix(ip, "+bfd")), BFDEnabled: bfd})
	}
	return p
}

func gw(ip string, bfd bool) Gateway { return Gateway{IP: netip.MustParseAddr(ip), BFD: bfd} }

func route(policyName, ns, podName, ip string, gws ...Gateway) Route {
	return Route{Origin: dataplane.Origin{Kind: cluster.KindExternalRoute, Name: policyName},
		Pod: dataplane.Origin{Kind: cluster.KindPod, Namespace: ns, Name: podName}, PodIP: netip.MustParseAddr(ip), Gateways: gws}
}

func policyErr(part Part, name string) error {
	for _, p := range part.Policies {
		if p.Origin.Name == name {
			return p.Err
		}
	}
	return nil
}

// Local pods of targeted namespaces only, each address with the gateways of its family;
// addresses normalised as net.ParseIP does, duplicates merged (the later hop's BFD).
func TestStaticHops(t *testing.T) {
	objs := []runtime.Object{
		namespace("a", map[string]string{"team": "x"}), namespace("b", nil),
		pod("a", "p1", "n1", "10.244.1.5", "fd00::5"), pod("a", "remote", "n2", "10.244.2.5"),
		pod("b", "other", "n1", "10.244.1.6"),
		policy("pol", "x", 0, "192.0.2.1", "::ffff:192.0.2.9", "2001:db8::1+bfd", "192.0.2.1+bfd"),
	}
	part := compile(t, &Compiler{}, objs...)
	want := []Route{
		route("pol", "a", "p1", "10.244.1.5", gw("192.0.2.1", true), gw("192.0.2.9", false)),
		route("pol", "a", "p1", "fd00::5", gw("2001:db8::1", true)),
	}
	if !reflect.DeepEqual(part.Routes, want) {
		t.Errorf("routes\n got %+v\nwant %+v", part.Routes, want)
	}
	wantPol := []Policy{{Origin: dataplane.Origin{Kind: cluster.KindExternalRoute, Name: "pol"},
		Gateways: []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("2001:db8::1")}}}
	if !reflect.DeepEqual(part.Policies, wantPol) {
		t.Errorf("policies %+v, want %+v", part.Policies, wantPol)
	}
}

// A family without gateways is skipped; a pod none of whose families has one fails the policy.
func TestFamilies(t *testing.T) {
	ns := namespace("a", map[string]string{"team": "x"})
	part := compile(t, &Compiler{}, ns, pod("a", "p1", "n1", "10.244.1.5", "fd00::5"), policy("pol", "x", 0, "2001:db8::1"))
	if want := []Route{route("pol", "a", "p1", "fd00::5", gw("2001:db8::1", false))}; !reflect.DeepEqual(part.Routes, want) {
		t.Errorf("dual-stack pod: %+v, want %+v", part.Routes, want)
	}
	part = compile(t, &Compiler{}, ns, pod("a", "p1", "n1", "10.244.1.5"), policy("pol", "x", 0, "2001:db8::1"))
	want := "gateway specified for namespace a with gateway addresses [10.244.1.5/32] but no valid routes exist for pod: p1"
	if err := policyErr(part, "pol"); err == nil || err.Error() != want || len(part.Routes) != 0 {
		t.Errorf("IPv4 pod, IPv6 gateway: %v %+v, want %q", err, part.Routes, want)
	}
}

func TestStaticErrors(t *testing.T) {
	for _, ip := range []string{"192.0.2.1%eth0", "fe80::1%eth0", "192.0.2.300", "gw.example"} {
		part := compile(t, &Compiler{}, namespace("a", map[string]string{"team": "x"}), pod("a", "p1", "n1", "10.244.1.5"),
			policy("pol", "x", 0, "192.0.2.2", ip))
		want := "failed to build updated policy: failed to process static GW: could not parse routing static gw annotation value '" + ip + "'"
		if err := policyErr(part, "pol"); err == nil || err.Error() != want || len(part.Routes) != 0 {
			t.Errorf("%s: %v, %d routes; want %q", ip, err, len(part.Routes), want)
		}
	}
}

// A namespace belongs to one policy: the oldest on a first claim, else the one holding it.
func TestNamespaceConflict(t *testing.T) {
	ns := namespace("a", map[string]string{"team": "x", "also": "y"})
	p1 := pod("a", "p1", "n1", "10.244.1.5")
	older := policy("zz-older", "x", 0, "192.0.2.1")
	newer := policy("aa-newer", "x", 1, "192.0.2.2")
	newer.Spec.From.NamespaceSelector.MatchLabels = map[string]string{"also": "y"}
	want := "failed to build updated policy: failed to update policy aa-newer: namespaces [a] are already affected by another policy: zz-older"
	part := compile(t, &Compiler{}, ns, p1, older, newer)
	if err := policyErr(part, "aa-newer"); err == nil || err.Error() != want {
		t.Errorf("newer: %v, want %q", err, want)
	}
	if err := policyErr(part, "zz-older"); err != nil {
		t.Errorf("older failed: %v", err)
	}
	if want := []Route{route("zz-older", "a", "p1", "10.244.1.5", gw("192.0.2.1", false))}; !reflect.DeepEqual(part.Routes, want) {
		t.Errorf("routes %+v, want %+v", part.Routes, want)
	}
	// The newer one alone claims the namespace; the older one, created since, finds it held.
	c := &Compiler{}
	compile(t, c, ns, p1, newer)
	part = compile(t, c, ns, p1, older, newer)
	want = "failed to build updated policy: failed to update policy zz-older: namespaces [a] are already affected by another policy: aa-newer"
	if err := policyErr(part, "zz-older"); err == nil || err.Error() != want || part.Routes[0].Origin.Name != "aa-newer" {
		t.Errorf("held namespace: %v %+v, want %q", err, part.Routes, want)
	}
}

// A failed policy keeps what it programmed for the pods still there, adds nothing new, and
// keeps holding its namespaces; fixed, it is compiled afresh.
func TestFailedPolicyKeepsRoutes(t *testing.T) {
	ns := namespace("a", map[string]string{"team": "x"})
	c := &Compiler{}
	good := policy("pol", "x", 0, "192.0.2.1")
	compile(t, c, ns, pod("a", "p1", "n1", "10.244.1.5"), pod("a", "p2", "n1", "10.244.1.6"), good)
	bad := policy("pol", "x", 0, "192.0.2.2", "bad")
	other := policy("later", "x", 1, "192.0.2.3")
	part := compile(t, c, ns, pod("a", "p1", "n1", "10.244.1.5"), pod("a", "p3", "n1", "10.244.1.7"), bad, other)
	if want := []Route{route("pol", "a", "p1", "10.244.1.5", gw("192.0.2.1", false))}; !reflect.DeepEqual(part.Routes, want) {
		t.Errorf("failed policy: %+v, want %+v", part.Routes, want)
	}
	if policyErr(part, "pol") == nil || !strings.Contains(fmtErr(policyErr(part, "later")), "already affected by another policy: pol") {
		t.Errorf("errors: %v / %v", policyErr(part, "pol"), policyErr(part, "later"))
	}
	part = compile(t, c, ns, pod("a", "p3", "n1", "10.244.1.7"), good)
	if want := []Route{route("pol", "a", "p3", "10.244.1.7", gw("192.0.2.1", false))}; !reflect.DeepEqual(part.Routes, want) {
		t.Errorf("fixed: %+v, want %+v", part.Routes, want)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The Namespaces, listed and sorted, are kept while none changed, and read again once one did.
func TestSortedNamespacesKept(t *testing.T) {
	ns := func(name string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	snap := watcherstest.Snapshot(ns("b"), ns("a"))
	snap.Generations = watchers.NewGenerations(&corev1.Namespace{})
	c := &Compiler{}
	names := func() string {
		list, err := c.sortedNamespaces(snap)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range list {
			out = append(out, n.Name)
		}
		return strings.Join(out, ",")
	}
	if got := names(); got != "a,b" {
		t.Fatalf("namespaces %s, want a,b", got)
	}
	gens := snap.Generations
	snap = watcherstest.Snapshot(ns("b"), ns("a"), ns("c")) // the cache took c; its event not yet counted
	snap.Generations = gens
	if got := names(); got != "a,b" {
		t.Errorf("no Namespace counted as changed, yet read again: %s", got)
	}
	gens.Changed(&corev1.Namespace{}, "")
	if got := names(); got != "a,b,c" {
		t.Errorf("a Namespace changed: %s, want a,b,c", got)
	}
}
