package egressqos

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
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
