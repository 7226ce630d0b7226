package egressip

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// selecting is an assigned EgressIP created `age` minutes after epoch that selects namespaces
// labeled team=a and pods by podLabels (nil: all pods).
func selecting(name string, age int, podLabels map[string]string) *ovnv1.EgressIP {
	e := eip(name, age, ips("10.0.0.100"), "10.0.0.100@n1")
	e.Spec.NamespaceSelector = metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	if podLabels != nil {
		e.Spec.PodSelector = metav1.LabelSelector{MatchLabels: podLabels}
	}
	return e
}

// servingAmong is the object serving pod, in a namespace labelled nsLabels, among eips: the
// candidates the compile's selection finds, then its pick.
func servingAmong(t *testing.T, pod *corev1.Pod, nsLabels map[string]string, eips []*ovnv1.EgressIP, current string) (string, []Event) {
	t.Helper()
	objs := []runtime.Object{pod, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pod.Namespace, Labels: nsLabels}}}
	for _, e := range eips {
		objs = append(objs, e)
	}
	in := &cluster.Input{Snap: watcherstest.Snapshot(objs...), Node: "n1"}
	namespaces, err := selectedNamespaces(in.Snap, eips, (&Compiler{}).picked(in.Snap))
	if err != nil {
		t.Fatal(err)
	}
	candidates, err := selectedPods(in, eips, namespaces)
	if err != nil || len(candidates) > 1 {
		t.Fatalf("candidates %v, %v", candidates, err)
	}
	if len(candidates) == 0 {
		return "", nil
	}
	return serving(candidates[0].pod, candidates[0].eips, current)
}

func TestServing(t *testing.T) {
	app := map[string]string{"app": "web"}
	pod := func(f func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web-0", Labels: app},
			Spec: corev1.PodSpec{NodeName: "n2"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if f != nil {
			f(p)
		}
		return p
	}
	teamA := map[string]string{"team": "a"}
	unassigned := selecting("unassigned", 0, nil)
	unassigned.Status.Items = nil
	badSelector := selecting("bad-selector", 0, nil)
	badSelector.Spec.PodSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}

	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		nsLabels  map[string]string
		eips      []*ovnv1.EgressIP
		current   string
		want      string
		standbyOf []string // objects that get UndefinedRequest
	}{
		{name: "one object selects the pod, empty pod selector = all pods", pod: pod(nil), nsLabels: teamA,
			eips: []*ovnv1.EgressIP{selecting("a", 0, nil)}, want: "a"},
		{name: "namespace selector does not match", pod: pod(nil), nsLabels: map[string]string{"team": "b"},
			eips: []*ovnv1.EgressIP{selecting("a", 0, nil)}},
		{name: "pod selector does not match", pod: pod(nil), nsLabels: teamA,
			eips: []*ovnv1.EgressIP{selecting("a", 0, map[string]string{"app": "db"})}},
		{name: "both selectors must match", pod: pod(nil), nsLabels: teamA,
			eips: []*ovnv1.EgressIP{selecting("db", 0, map[string]string{"app": "db"}), selecting("web", 1, app)}, want: "web"},
		{name: "several select it: the oldest serves, the others stand by", pod: pod(nil), nsLabels: teamA,
			eips: []*ovnv1.EgressIP{selecting("z", 2, nil), selecting("b", 1, app), selecting("a", 1, nil)},
			want: "a", standbyOf: []string{"b", "z"}},
		{name: "the object already serving keeps the pod when an older one appears", pod: pod(nil), nsLabels: teamA,
			eips: []*ovnv1.EgressIP{selecting("older", 0, nil), selecting("serving", 5, nil)}, current: "serving",
			want: "serving", standbyOf: []string{"older"}},
		{name: "the serving object no longer qualifies: the oldest standby takes over", pod: pod(nil), nsLabels: teamA,
			eips: []*ovnv1.EgressIP{selecting("s2", 3, nil), selecting("s1", 2, nil), unassigned}, current: "unassigned",
			want: "s1", standbyOf: []string{"s2"}},
		{name: "an object without status entries neither serves nor stands by", pod: pod(nil), nsLabels: teamA,
			eips: []*ovnv1.EgressIP{unassigned}},
		{name: "an invalid selector selects nothing", pod: pod(nil), nsLabels: teamA, eips: []*ovnv1.EgressIP{badSelector}},
		{name: "host-network pod", pod: pod(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), nsLabels: teamA,
			eips: []*ovnv1.EgressIP{selecting("a", 0, nil)}},
		{name: "unscheduled pod", pod: pod(func(p *corev1.Pod) { p.Spec.NodeName = "" }), nsLabels: teamA,
			eips: []*ovnv1.EgressIP{selecting("a", 0, nil)}},
		{name: "completed pod", pod: pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), nsLabels: teamA,
			eips: []*ovnv1.EgressIP{selecting("a", 0, nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, events := servingAmong(t, tc.pod, tc.nsLabels, tc.eips, tc.current)
			if got != tc.want {
				t.Errorf("serving = %q, want %q", got, tc.want)
			}
			var want []Event
			for _, s := range tc.standbyOf {
				want = append(want, Event{EgressIP: s, Type: corev1.EventTypeWarning, Reason: "UndefinedRequest",
					Message: "EgressIP object " + s + " will not be configured for pod ns1_web-0 since another egressIP object " + tc.want + " is serving it, this is undefined"})
			}
			if !reflect.DeepEqual(events, want) {
				t.Errorf("events\n got %+v\nwant %+v", events, want)
			}
		})
	}
}
