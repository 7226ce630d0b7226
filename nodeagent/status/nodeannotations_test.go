package status

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/nodeagent/egressservice"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// A new host labels its Node for the services it hosts once the previous host's label is gone,
// or handoverGrace after it first saw it there (that node's agent may be down); it takes off
// the labels of services it no longer hosts at once.
func TestServiceLabelsHandover(t *testing.T) {
	label := egressservice.NodeLabel("a", "web")
	node := func(name string, lbls ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		for _, l := range lbls {
			n.Labels[l] = ""
		}
		return n
	}
	es := &ovnv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "web"}, Status: ovnv1.EgressServiceStatus{Host: "n2"}}
	stale := egressservice.NodeLabel("a", "gone")
	n2 := node("n2", stale)
	w := &Writer{Node: "n2", Snapshot: watcherstest.Snapshot(es, node("n1", label), n2)}
	t0 := time.Now()
	changes, again := w.serviceLabels(n2, t0)
	if want := map[string]any{stale: nil}; !reflect.DeepEqual(changes, want) || again != handoverGrace {
		t.Errorf("old host still labelled: %v, again in %v; want %v, again in %v", changes, again, want, handoverGrace)
	}
	changes, again = w.serviceLabels(n2, t0.Add(handoverGrace-time.Second))
	if len(changes) != 1 || again != time.Second {
		t.Errorf("within the grace: %v, again in %v", changes, again)
	}
	changes, again = w.serviceLabels(n2, t0.Add(handoverGrace))
	if want := map[string]any{stale: nil, label: ""}; !reflect.DeepEqual(changes, want) || again != 0 {
		t.Errorf("grace over: %v, again in %v; want %v", changes, again, want)
	}
	// The old host took its label off: the new one labels itself at once.
	w = &Writer{Node: "n2", Snapshot: watcherstest.Snapshot(es, node("n1", label), n2)}
	w.serviceLabels(n2, t0)
	w.Snapshot = watcherstest.Snapshot(es, node("n1"), n2)
	if changes, again := w.serviceLabels(n2, t0.Add(time.Millisecond)); changes[label] != "" || again != 0 {
		t.Errorf("old host unlabelled: %v, again in %v", changes, again)
	}
}
