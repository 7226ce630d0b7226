package egressqos

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers/watcherstest"
)

func pod(name, ip string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}}}}
}

func TestCompileSelectsPods(t *testing.T) {
	cidr := "203.0.113.0/24"
	q := &ovnv1.EgressQoS{ObjectMeta: metav1.ObjectMeta{Namespace: "q", Name: "default"}, Spec: ovnv1.EgressQoSSpec{Egress: []ovnv1.EgressQoSRule{
		{DSCP: 46, DstCIDR: &cidr, PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "voice"}}},
		{DSCP: 10},
	}}}
	voice := pod("voice", "10.244.1.5")
	voice.Labels = map[string]string{"app": "voice"}
	web := pod("web", "10.244.1.6")
	web.Namespace, voice.Namespace = "q", "q"
	other := pod("other", "10.244.1.7")
	in := &cluster.Input{Snap: watcherstest.Snapshot(q, voice, web, other), Node: "n1"}
	var err error
	if in.Pods, err = cluster.LocalPods(in.Snap, "n1"); err != nil {
		t.Fatal(err)
	}
	part, err := Compile(in)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]int{}
	for o, rules := range part.PodRules {
		got[o.Name] = rules
	}
	if !slices.Equal(got["voice"], []int{0, 1}) || !slices.Equal(got["web"], []int{1}) || got["other"] != nil {
		t.Errorf("selection %v", got)
	}
	if r := part.QoS[0].Rules; r[0].Prefixes[0] != netip.MustParsePrefix(cidr) || len(r[1].Prefixes) != 2 || r[1].DSCP != 10 {
		t.Errorf("rules %+v", r)
	}
}

// TestCompileServiceBackends: a pod's traffic to a Service backend outside the cluster networks
// gets the DSCP of the first of its rules whose destination holds the backend (what upstream's
// to-lport QoS sees after load balancing); pod backends, pods no rule selects, and backends no
// rule covers get nothing.
func TestCompileServiceBackends(t *testing.T) {
	voiceCIDR, otherCIDR := "203.0.113.0/24", "198.51.100.0/24"
	q := &ovnv1.EgressQoS{ObjectMeta: metav1.ObjectMeta{Namespace: "q", Name: "default"}, Spec: ovnv1.EgressQoSSpec{Egress: []ovnv1.EgressQoSRule{
		{DSCP: 46, DstCIDR: &voiceCIDR, PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "voice"}}},
		{DSCP: 10, DstCIDR: &otherCIDR},
		{DSCP: 20, DstCIDR: &voiceCIDR},
	}}}
	voice := pod("voice", "10.244.1.5")
	voice.Namespace, voice.Labels = "q", map[string]string{"app": "voice"}
	web := pod("web", "10.244.1.6")
	web.Namespace = "q"
	other := pod("other", "10.244.1.7") // namespace ns: no EgressQoS
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "s", Name: "ext"}, Spec: corev1.ServiceSpec{ClusterIPs: []string{"10.96.0.20"}}}
	eps := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "s", Name: "ext", Labels: map[string]string{discoveryv1.LabelServiceName: "ext"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"203.0.113.10", "192.0.2.1", "10.244.2.9"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](80), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	in := &cluster.Input{Snap: watcherstest.Snapshot(q, voice, web, other, svc, eps), Node: "n1",
		Networks: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/16")}}
	var err error
	if in.Pods, err = cluster.LocalPods(in.Snap, "n1"); err != nil {
		t.Fatal(err)
	}
	part, err := Compile(in)
	if err != nil {
		t.Fatal(err)
	}
	origin := func(rule int) dataplane.Origin {
		return dataplane.Origin{Kind: "EgressQoS", Namespace: "q", Name: "default", Rule: rule}
	}
	backend := netip.MustParseAddr("203.0.113.10")
	want := []dataplane.BackendDSCP{
		{Origin: origin(0), Pod: netip.MustParseAddr("10.244.1.5"), Backend: backend, Protocol: 6, Port: 80, DSCP: 46},
		{Origin: origin(2), Pod: netip.MustParseAddr("10.244.1.6"), Backend: backend, Protocol: 6, Port: 80, DSCP: 20},
	}
	got := slices.Clone(part.BackendDSCP)
	slices.SortFunc(got, func(a, b dataplane.BackendDSCP) int { return a.Pod.Compare(b.Pod) })
	if !reflect.DeepEqual(got, want) {
		t.Errorf("backend DSCP:\n got %+v\nwant %+v", got, want)
	}
}

// TestCompileErrorsAsUpstream: what cannot be applied fails the whole object with upstream's
// message per rule ("cannot create egressqos Rule to destination <dstCIDR or any> ..."),
// several on one line; 1000 rules are accepted and 1001 refused, as upstream.
func TestCompileErrorsAsUpstream(t *testing.T) {
	bogus := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}
	badCIDR := "1.2.3.4/42"
	many := make([]ovnv1.EgressQoSRule, maxRules+1)
	for _, tc := range []struct {
		name  string
		rules []ovnv1.EgressQoSRule
		want  string
	}{
		{"invalid operator", []ovnv1.EgressQoSRule{{DSCP: 46, PodSelector: bogus}},
			`cannot create egressqos Rule to destination any for namespace q: "Bogus" is not a valid label selector operator`},
		{"two errors on one line", []ovnv1.EgressQoSRule{{DSCP: 46, PodSelector: bogus}, {DSCP: 10}, {DSCP: 12, DstCIDR: &badCIDR}},
			`[cannot create egressqos Rule to destination any for namespace q: "Bogus" is not a valid label selector operator, ` +
				`cannot create egressqos Rule to destination 1.2.3.4/42 for namespace q: invalid CIDR address: 1.2.3.4/42]`},
		{"1000 rules", many[:maxRules], ""},
		{"1001 rules", many, "cannot create EgressQoS with 1001 rules - maximum is 1000"},
	} {
		q := &ovnv1.EgressQoS{ObjectMeta: metav1.ObjectMeta{Namespace: "q", Name: "default"}, Spec: ovnv1.EgressQoSSpec{Egress: tc.rules}}
		part, err := Compile(&cluster.Input{Snap: watcherstest.Snapshot(q), Node: "n1"})
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if e := part.QoS[0].Err; e != nil {
			got = e.Error()
		}
		if got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
