package watchers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// A sync's captured marks cover what the caches held when it began; a status-only event since
// moves them on, a change of a spec since does not (that needs the next sync).
func TestMarksThrough(t *testing.T) {
	ef := func(rv string) *ovnv1.EgressFirewall {
		return &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "default", ResourceVersion: rv}}
	}
	m := NewMarks(&ovnv1.EgressFirewall{})
	kind := &ovnv1.EgressFirewall{}
	if got := m.Capture().Through(kind); got != 0 {
		t.Errorf("nothing seen: %d", got)
	}
	m.Observe(kind, ef("10"), true)
	select {
	case <-m.Moved():
	default:
		t.Error("no signal after a mark moved")
	}
	c := m.Capture()
	if got := c.Through(kind); got != 10 {
		t.Errorf("captured after 10: %d", got)
	}
	m.Observe(kind, ef("12"), false) // the controller's status write
	if got := c.Through(kind); got != 12 {
		t.Errorf("status-only event since: %d, want 12", got)
	}
	m.Observe(kind, ef("15"), true) // a spec change the sync did not read
	m.Observe(kind, ef("16"), false)
	if got := c.Through(kind); got != 10 {
		t.Errorf("spec change since the capture: %d, want the captured 10", got)
	}
	if got := m.Capture().Through(kind); got != 16 {
		t.Errorf("next sync: %d, want 16", got)
	}
	// Older events (a relist) and tombstones move nothing; other kinds are not followed.
	m.Observe(kind, ef("3"), false)
	m.Observe(kind, cache.DeletedFinalStateUnknown{Key: "a/default", Obj: ef("99")}, true)
	m.Observe(&corev1.Node{}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "200"}}, true)
	c = m.Capture()
	if got := c.Through(kind); got != 16 {
		t.Errorf("after an older event and a tombstone: %d, want 16", got)
	}
	if got := c.Through(&corev1.Node{}); got != 0 {
		t.Errorf("a kind not followed: %d", got)
	}
	var none *Marks
	none.Observe(kind, ef("1"), true)
	if got := none.Capture().Through(kind); got != 0 {
		t.Errorf("no marks: %d", got)
	}
}
