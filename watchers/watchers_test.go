package watchers

import (
	"testing"
	"time"

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

	// A spec change reaches both subscribers and is pending from its first signal until taken.
	before := time.Now()
	w.signal(true)
	after := time.Now()
	time.Sleep(time.Millisecond) // so that the second signal's time is after the first's
	w.signal(true)
	for name, ch := range map[string]<-chan struct{}{"spec": spec, "status": all} {
		select {
		case <-ch:
		default:
			t.Errorf("a spec change did not reach the %s subscriber", name)
		}
	}
	if p := w.TakePending(); p.Before(before) || p.After(after) {
		t.Errorf("pending since %s, want the first signal's time, in [%s, %s]", p, before, after)
	}
	if !w.TakePending().IsZero() {
		t.Error("pending again without a new change")
	}
}

// Nodes program EgressServices from status.host: its change counts as a spec change.
func TestStatusOnlyEgressServiceHost(t *testing.T) {
	es := func(host string) *ovnv1.EgressService {
		return &ovnv1.EgressService{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: ovnv1.EgressServiceStatus{Host: host}}
	}
	if statusOnly(es(""), es("n1")) {
		t.Error("a new status.host counted as status only")
	}
	if !statusOnly(es("n1"), es("n1")) {
		t.Error("an unchanged EgressService counted as a spec change")
	}
}
