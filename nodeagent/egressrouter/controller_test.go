package egressrouter

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egressd/egressd/watchers"
)

// The leader counts a router pod's unreadiness on its own clock, from when it first saw it
// running and not ready; a ready moment starts again.
func TestUnreadiness(t *testing.T) {
	pod := &watchers.Pod{ObjectMeta: metav1.ObjectMeta{UID: "p1"}, Status: watchers.PodStatus{Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}}
	t0 := time.Now()
	seen := map[types.UID]time.Time{}
	step := func(at time.Duration, usable bool, wantUnready, wantStuck bool) {
		t.Helper()
		next := map[types.UID]time.Time{}
		unready, stuck := unreadiness(seen, next, pod, t0.Add(at), usable)
		if unready != wantUnready || stuck != wantStuck {
			t.Errorf("at %s: unready %t stuck %t, want %t %t", at, unready, stuck, wantUnready, wantStuck)
		}
		seen = next
	}
	step(0, true, false, false)
	step(25*time.Second, true, false, false)
	step(35*time.Second, true, true, false)
	step(65*time.Second, false, true, false) // its node not usable: not stuck
	step(65*time.Second, true, true, true)
	pod.Status.Conditions[0].Status = corev1.ConditionTrue
	step(70*time.Second, true, false, false)
	pod.Status.Conditions[0].Status = corev1.ConditionFalse
	step(75*time.Second, true, false, false) // counted again from here
	step(100*time.Second, true, false, false)
	step(106*time.Second, true, true, false)
	pod.Status.Phase = corev1.PodPending
	step(200*time.Second, true, false, false)
}
