package egressservice

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The controller moves a service's host label itself: the old host's comes off (also when that
// node's agent is dead) before the new host's goes on, labels of services without a host or
// gone are removed, and other labels are never touched.
func TestLabelChanges(t *testing.T) {
	web, api, gone := NodeLabel("a", "web"), NodeLabel("a", "api"), NodeLabel("b", "gone")
	node := func(name string, lbls ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
		for _, l := range lbls {
			n.Labels[l] = ""
		}
		return n
	}
	nodes := []*corev1.Node{node("n1", web, gone), node("n2", api), node("n3")}
	removals, additions := labelChanges(nodes, map[string]string{web: "n2", api: "n2", NodeLabel("c", "nohost"): "n9"})
	wantRemovals := []labelChange{{node: "n1", label: gone}, {node: "n1", label: web}}
	if got := sortedChanges(removals); !reflect.DeepEqual(got, sortedChanges(wantRemovals)) {
		t.Errorf("removals %v, want %v", got, wantRemovals)
	}
	if want := []labelChange{{node: "n2", label: web, add: true}}; !reflect.DeepEqual(additions, want) {
		t.Errorf("additions %v, want %v", additions, want)
	}
	// In place: nothing to do.
	removals, additions = labelChanges([]*corev1.Node{node("n2", web)}, map[string]string{web: "n2"})
	if len(removals)+len(additions) != 0 {
		t.Errorf("labels in place: removals %v, additions %v", removals, additions)
	}
}

func sortedChanges(c []labelChange) map[labelChange]bool {
	m := map[labelChange]bool{}
	for _, x := range c {
		m[x] = true
	}
	return m
}
