package watchers

import (
	"reflect"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fresh is s in memory of its own, as a decoder hands out each string.
func fresh(s string) string { return strings.Clone(s) }

func sameString(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// The interner shares equal values while it remembers them, and remembers at most two
// generations: its memory is bounded whatever comes through.
func TestInternerRemembersTwoGenerations(t *testing.T) {
	in := newInterner[string, *int](2)
	made := 0
	get := func(k string) *int { return in.get(k, func() *int { made++; return new(int) }) }
	a := get("a")
	if get("a") != a || made != 1 {
		t.Fatalf("a second a was made anew (%d made)", made)
	}
	get("b")
	get("c") // a and b become the previous generation
	if get("a") != a {
		t.Error("a, in the previous generation, was not shared")
	}
	for _, k := range []string{"d", "e", "f", "g"} {
		get(k)
	}
	if n := len(in.cur) + len(in.prev); n > 4 {
		t.Errorf("remembers %d values, want at most two generations of 2", n)
	}
	if before := made; get("a") == a || made != before+1 {
		t.Error("a, forgotten two generations ago, was still remembered")
	}
}

// Pods decoded apart share their namespace, node, labels and readiness once cached; pods that
// differ keep their own.
func TestTransformSharesWhatPodsRepeat(t *testing.T) {
	pod := func(name, tier string, ready corev1.ConditionStatus) *Pod {
		return trimPod(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fresh(name), Namespace: fresh("shop"),
				Labels: map[string]string{fresh("app"): fresh("web"), fresh("tier"): fresh(tier)}},
			Spec: corev1.PodSpec{NodeName: fresh("node-a")},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fresh("10.0.0.1"), PodIPs: []corev1.PodIP{{IP: fresh("10.0.0.1")}},
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}},
		})
	}
	a, b, c := pod("a", "1", corev1.ConditionTrue), pod("b", "1", corev1.ConditionTrue), pod("c", "2", corev1.ConditionFalse)
	if !sameString(a.Namespace, b.Namespace) || !sameString(a.Spec.NodeName, b.Spec.NodeName) || !sameMap(a.Labels, b.Labels) ||
		&a.Status.Conditions[0] != &b.Status.Conditions[0] {
		t.Error("pods a and b do not share their namespace, node, labels and readiness")
	}
	if !sameString(a.Status.PodIP, a.Status.PodIPs[0].IP) {
		t.Error("a pod keeps two copies of its address")
	}
	if sameMap(a.Labels, c.Labels) || c.Labels["tier"] != "2" || c.Labels["app"] != "web" || len(c.Labels) != 2 {
		t.Errorf("pod c's labels %v are wrong or a's", c.Labels)
	}
	if got := c.Status.Conditions; len(got) != 1 || got[0].Type != corev1.PodReady || got[0].Status != corev1.ConditionFalse {
		t.Errorf("pod c's readiness = %+v", got)
	}
	if !sameString(a.Labels["app"], c.Labels["app"]) {
		t.Error("label values are not shared across label sets")
	}
}

// EgressFirewalls decoded apart share the rule parts and status strings they repeat, and keep
// what they do not.
func TestTransformSharesWhatFirewallsRepeat(t *testing.T) {
	a, b := decodedFirewall(t, 1), decodedFirewall(t, 2)
	if !reflect.DeepEqual(a.Spec, scaleFirewall(1).Spec) || !reflect.DeepEqual(a.Status, scaleFirewall(1).Status) {
		t.Fatalf("transform changed what the firewall says: %+v", a)
	}
	ra, rb := a.Spec.Egress, b.Spec.Egress
	if !sameString(string(ra[0].Type), string(rb[0].Type)) || !sameString(ra[0].Ports[0].Protocol, rb[0].Ports[0].Protocol) ||
		!sameString(ra[6].To.CIDRSelector, rb[6].To.CIDRSelector) || ra[3].To.NodeSelector != rb[3].To.NodeSelector ||
		!sameString(a.Status.Messages[0], b.Status.Messages[0]) {
		t.Error("firewalls 1 and 2 do not share their rule types, protocols, equal destinations, node selectors and status entries")
	}
	if ra[0].To.CIDRSelector == rb[0].To.CIDRSelector {
		t.Fatal("the test's firewalls were meant to differ in their first rule")
	}
}
