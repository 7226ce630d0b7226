package egressservice

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	ovnfake "github.com/egressd/egressd/api/generated/clientset/versioned/fake"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers/watcherstest"
)

func cand(name string, ready, reachable bool, lbls map[string]string) Candidate {
	return Candidate{Name: name, Ready: ready, Reachable: reachable, Labels: lbls}
}

func req(name, current string, sel labels.Selector, epNodes ...string) Request {
	return Request{Namespace: "a", Name: name, Current: current, Selector: sel, EndpointNodes: epNodes}
}

func hosts(rs []Result) map[string]string {
	out := map[string]string{}
	for _, r := range rs {
		out[r.Name] = r.Host + "|" + r.Reason
	}
	return out
}

func TestElect(t *testing.T) {
	all := labels.Everything()
	egress := labels.SelectorFromSet(labels.Set{"egress": "yes"})
	nodes := []Candidate{cand("n1", true, true, map[string]string{"egress": "yes"}), cand("n2", true, true, nil),
		cand("n3", false, true, map[string]string{"egress": "yes"}), cand("n4", true, false, map[string]string{"egress": "yes"})}
	for _, tc := range []struct {
		name string
		reqs []Request
		want map[string]string
	}{
		{"spread: a node with no allocation first", []Request{req("s1", "", all, "n1"), req("s2", "", all, "n1"), req("s3", "", all, "n1")},
			map[string]string{"s1": "n1|", "s2": "n2|", "s3": "n1|"}},
		{"current host kept, others avoid it", []Request{req("s1", "", all, "n1"), req("s2", "n1", all, "n1")},
			map[string]string{"s1": "n2|", "s2": "n1|"}},
		{"selector; NotReady and unreachable nodes excluded", []Request{req("s1", "", egress, "n1"), req("s2", "n3", egress, "n1"), req("s3", "n4", egress, "n1")},
			map[string]string{"s1": "n1|", "s2": "n1|", "s3": "n1|"}},
		{"no match", []Request{req("s1", "n1", labels.SelectorFromSet(labels.Set{"x": "y"}), "n1")},
			map[string]string{"s1": "|" + ReasonNoNode}},
		{"no endpoints", []Request{req("s1", "n1", all)}, map[string]string{"s1": "|" + ReasonNoEndpoints}},
		{"not a LoadBalancer", []Request{{Namespace: "a", Name: "s1", Current: "n1", Selector: all, EndpointNodes: []string{"n1"}, Unusable: ReasonNoLoadBalancer}},
			map[string]string{"s1": "|" + ReasonNoLoadBalancer}},
		{"Network: ALL", []Request{{Namespace: "a", Name: "s1", Network: true}}, map[string]string{"s1": "ALL|"}},
		{"Network without an ingress IP: ALL, and why", []Request{{Namespace: "a", Name: "s1", Network: true, Unusable: ReasonNoIngressIP}},
			map[string]string{"s1": "ALL|" + ReasonNoIngressIP}},
	} {
		if got := hosts(Elect(tc.reqs, nodes)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The Service decides whether a host is wanted: missing or not a LoadBalancer, or without
// an ingress IP, none. sourceIPBy Network gets ALL once its Service exists, of any type, as
// upstream's cluster manager writes it before looking at the type or the ingress IPs.
func TestRequestForUnusable(t *testing.T) {
	clusterIP := lbService("a", "web", "172.18.0.210")
	clusterIP.Spec.Type = corev1.ServiceTypeClusterIP
	for _, tc := range []struct {
		what              string
		svc               *corev1.Service
		want, wantNetwork string
	}{{"no Service", nil, ReasonNoLoadBalancer, "|" + ReasonNoLoadBalancer},
		{"ClusterIP", clusterIP, ReasonNoLoadBalancer, "ALL|" + ReasonNoLoadBalancer},
		{"LB without ingress", lbService("a", "web"), ReasonNoIngressIP, "ALL|" + ReasonNoIngressIP},
		{"LB", lbService("a", "web", "172.18.0.210"), "", "ALL|"}} {
		for _, by := range []ovnv1.SourceIPMode{"", ovnv1.SourceIPNetwork} {
			r := RequestFor(egressService("a", "web", "", by, ""), tc.svc, nil)
			if r.Unusable != tc.want {
				t.Errorf("%s, sourceIPBy %q: %q, want %q", tc.what, by, r.Unusable, tc.want)
			}
			if by != ovnv1.SourceIPNetwork {
				continue
			}
			if got := hosts(Elect([]Request{r}, nil))["web"]; got != tc.wantNetwork {
				t.Errorf("%s, sourceIPBy Network: elected %q, want %q", tc.what, got, tc.wantNetwork)
			}
		}
	}
}

// ETP=Local: only a node with a local endpoint may host.
func TestRequestForETPLocal(t *testing.T) {
	svc := lbService("a", "web", "172.18.0.210")
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	es := egressService("a", "web", "", "", "")
	r := RequestFor(es, svc, []endpoint{{ip: netip.MustParseAddr("10.244.2.5"), node: "n2"}})
	nodes := []Candidate{cand("n1", true, true, map[string]string{corev1.LabelHostname: "n1"}),
		cand("n2", true, true, map[string]string{corev1.LabelHostname: "n2"})}
	r2 := req("other", "", labels.Everything(), "n2") // loads n2 first
	if got := hosts(Elect([]Request{r, r2}, nodes)); got["web"] != "n2|" {
		t.Errorf("ETP=Local: %v, want web on n2 (its only endpoint node)", got)
	}
}

type fakeProbes struct{ down map[string]bool }

func (f *fakeProbes) Set(map[string]netip.AddrPort) {}
func (f *fakeProbes) Reachable(n string) bool       { return !f.down[n] }
func (f *fakeProbes) Changed() <-chan struct{}      { return nil }

func readyNode(name string, lbls map[string]string) *corev1.Node {
	n := node(name, "192.0.2."+name[1:]+"/24", "")
	n.Labels = lbls
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	return n
}

// The controller writes status.host, and moves the service when its host becomes unreachable.
func TestControllerReconcile(t *testing.T) {
	es := egressService("a", "web", "", "", "")
	n1 := readyNode("n1", map[string]string{NodeLabel("a", "gone"): ""})
	n2 := readyNode("n2", nil)
	objs := []runtime.Object{es, n1, n2, lbService("a", "web", "172.18.0.210"),
		slice("a", "web", "web-1", discoveryv1.AddressTypeIPv4, [2]string{"n2", "10.244.2.5"})}
	ovn := ovnfake.NewSimpleClientset(es)
	probes := &fakeProbes{down: map[string]bool{}}
	kube := kubefake.NewClientset(n1, n2)
	c := &Controller{Client: ovn, Kube: kube, Snapshot: watcherstest.Snapshot(objs...), Networks: cluster.NetworkFlags{Pods: networks}, Probes: probes,
		Recorder: record.NewFakeRecorder(10), Log: slog.New(slog.DiscardHandler), recorded: map[string]string{}}
	ctx := context.Background()
	check := func(wantHost string) {
		t.Helper()
		got, _ := ovn.K8sOVNV1().EgressServices("a").Get(ctx, "web", metav1.GetOptions{})
		if got.Status.Host != wantHost {
			t.Errorf("status.host %q, want %q", got.Status.Host, wantHost)
		}
		// The host alone carries the service's label; the label of a service gone is off.
		for _, name := range []string{"n1", "n2"} {
			n, _ := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			_, web := n.Labels[NodeLabel("a", "web")]
			_, gone := n.Labels[NodeLabel("a", "gone")]
			if web != (name == wantHost) || gone {
				t.Errorf("%s labels %v, host %s", name, n.Labels, wantHost)
			}
		}
	}
	if err := c.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	check("n1") // n1 and n2 both free: the first by name
	// n1 unreachable: the service moves to n2 (the snapshot follows the API in the agent).
	probes.down["n1"] = true
	es = es.DeepCopy()
	es.Status.Host = "n1"
	// The snapshot follows the API (the controller's own label write included).
	n1, _ = kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	c.Snapshot = watcherstest.Snapshot(es, n1, n2, objs[3], objs[4])
	if err := c.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	check("n2")
}

// The leader's metrics: services per host follow status.host; a move counts against the node
// the service left, not a first election nor a sourceIPBy Network service.
func TestMetricsFollowHosts(t *testing.T) {
	m := NewMetrics()
	m.record([]string{"n1", "n1", "ALL", ""}, [][2]string{{"", "n1"}, {"", "n1"}, {"", "ALL"}})
	m.record([]string{"n2", "n1", "ALL", ""}, [][2]string{{"n1", "n2"}})
	if got := testutil.ToFloat64(m.Hosted.WithLabelValues("n1")); got != 1 {
		t.Errorf("hosted on n1 = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Hosted.WithLabelValues("n2")); got != 1 {
		t.Errorf("hosted on n2 = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Moves.WithLabelValues("n1")); got != 1 {
		t.Errorf("moves off n1 = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.Moves); n != 1 {
		t.Errorf("%d move series, want 1", n)
	}
}

// A service that cannot get a host says why in a Warning event, once per reason.
func TestControllerEvents(t *testing.T) {
	es := egressService("a", "web", "", "", "")
	rec := record.NewFakeRecorder(10)
	c := &Controller{Client: ovnfake.NewSimpleClientset(es), Networks: cluster.NetworkFlags{Pods: networks}, Probes: &fakeProbes{},
		Recorder: rec, Log: slog.New(slog.DiscardHandler), recorded: map[string]string{}}
	ctx := context.Background()
	for _, svc := range []*corev1.Service{nil, nil, lbService("a", "web")} {
		objs := []runtime.Object{es, readyNode("n1", nil)}
		if svc != nil {
			objs = append(objs, svc)
		}
		c.Snapshot = watcherstest.Snapshot(objs...)
		if err := c.reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{"Warning NoLoadBalancer no Service of the same name of type LoadBalancer: no node allocated",
		"Warning NoIngressIP the LoadBalancer Service has no ingress IP yet: no node allocated"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

// sourceIPBy Network on a Service that is not a LoadBalancer: status.host ALL as upstream, no
// node labelled, and a Warning that says no node applies it yet.
func TestControllerNetworkNotLoadBalancer(t *testing.T) {
	es := egressService("a", "web", "", ovnv1.SourceIPNetwork, "blue")
	svc := lbService("a", "web")
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	n1 := readyNode("n1", nil)
	ovn, kube, rec := ovnfake.NewSimpleClientset(es), kubefake.NewClientset(n1), record.NewFakeRecorder(10)
	c := &Controller{Client: ovn, Kube: kube, Snapshot: watcherstest.Snapshot(es, n1, svc), Networks: cluster.NetworkFlags{Pods: networks},
		Probes: &fakeProbes{}, Recorder: rec, Log: slog.New(slog.DiscardHandler), recorded: map[string]string{}}
	ctx := context.Background()
	if err := c.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := ovn.K8sOVNV1().EgressServices("a").Get(ctx, "web", metav1.GetOptions{}); got.Status.Host != NoSNATHost {
		t.Errorf("status.host %q, want %q", got.Status.Host, NoSNATHost)
	}
	if n, _ := kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); len(n.Labels) != 0 {
		t.Errorf("n1 labels %v, want none", n.Labels)
	}
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{"Warning NoLoadBalancer no Service of the same name of type LoadBalancer: host ALL, but no node applies it until then"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

// A cache behind the leader's own write (status.host still the old host) is no second move.
func TestControllerCacheBehind(t *testing.T) {
	stale := egressService("a", "web", "n1", "", "")
	stale.ResourceVersion = "1"
	current := stale.DeepCopy()
	current.Status.Host, current.ResourceVersion = "n2", "2"
	ovn := ovnfake.NewSimpleClientset(current)
	// The API server's optimistic concurrency, which the fake lacks.
	ovn.PrependReactor("update", "egressservices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.UpdateAction).GetObject().(*ovnv1.EgressService).ResourceVersion != current.ResourceVersion {
			return true, nil, apierrors.NewConflict(ovnv1.Resource("egressservices"), "web", errors.New("stale"))
		}
		return false, nil, nil
	})
	objs := []runtime.Object{stale, readyNode("n1", nil), readyNode("n2", nil), lbService("a", "web", "172.18.0.210"),
		slice("a", "web", "web-1", discoveryv1.AddressTypeIPv4, [2]string{"n2", "10.244.2.5"})}
	m := NewMetrics()
	c := &Controller{Client: ovn, Kube: kubefake.NewClientset(objs[1], objs[2]), Snapshot: watcherstest.Snapshot(objs...), Networks: cluster.NetworkFlags{Pods: networks},
		Probes: &fakeProbes{down: map[string]bool{"n1": true}}, Recorder: record.NewFakeRecorder(10), Log: slog.New(slog.DiscardHandler),
		recorded: map[string]string{}, Metrics: m}
	if err := c.reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.Moves); n != 0 {
		t.Errorf("%d move series, want none (the API object already had n2)", n)
	}
	if got := testutil.ToFloat64(m.Hosted.WithLabelValues("n2")); got != 1 {
		t.Errorf("hosted on n2 = %v, want 1", got)
	}
}
