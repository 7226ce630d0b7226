package watchers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

func TestStatusOnlyUpdates(t *testing.T) {
	ef := func(gen int64, labels map[string]string, msgs ...string) *ovnv1.EgressFirewall {
		return &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Generation: gen, Labels: labels}, Status: ovnv1.EgressFirewallStatus{Messages: msgs}}
	}
	if !statusOnly(ef(1, nil), ef(1, nil, "n: EgressFirewall Rules applied")) {
		t.Error("a status write counted as a spec change")
	}
	if statusOnly(ef(1, nil), ef(2, nil)) {
		t.Error("a spec change (new generation) counted as status only")
	}
	if statusOnly(ef(1, nil), ef(1, map[string]string{"a": "b"})) {
		t.Error("a label change counted as status only")
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	if statusOnly(pod, pod.DeepCopy()) {
		t.Error("pod updates always matter (IPs, readiness live in status)")
	}
	w := &Watchers{}
	spec, all := w.Subscribe(false), w.Subscribe(true)
	w.signal(false)
	select {
	case <-spec:
		t.Error("status-only change reached a spec subscriber")
	default:
	}
	select {
	case <-all:
	default:
		t.Error("status-only change did not reach a status subscriber")
	}
	if !w.TakePending().IsZero() {
		t.Error("a status-only change counted as pending programming")
	}
}
