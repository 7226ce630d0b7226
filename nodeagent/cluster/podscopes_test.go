package cluster

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/watchers"
)

// TestPodScopes: a pod selector with labels is one cluster-wide scope; one that selects every
// pod becomes a scope per selected namespace, however many;
// a selector that selects nothing reads nothing.
func TestPodScopes(t *testing.T) {
	var namespaces []*corev1.Namespace
	for i := range 40 {
		team := "a"
		if i >= 2 {
			team = "b"
		}
		namespaces = append(namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns%02d", i), Labels: map[string]string{"team": team}}})
	}
	teamA := labels.SelectorFromSet(labels.Set{"team": "a"})
	for _, c := range []struct {
		name          string
		nsSel, podSel labels.Selector
		want          []watchers.PodScope
	}{
		{"labelled pods", teamA, labels.SelectorFromSet(labels.Set{"app": "web"}), []watchers.PodScope{{Selector: "app=web"}}},
		{"every pod of two namespaces", teamA, labels.Everything(), []watchers.PodScope{{Namespace: "ns00"}, {Namespace: "ns01"}}},
		{"every pod of many namespaces", labels.Everything(), labels.Everything(), everyNamespace(namespaces)},
		{"nothing", teamA, labels.Nothing(), nil},
	} {
		if got := PodScopes(namespaces, c.nsSel, c.podSel); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func everyNamespace(namespaces []*corev1.Namespace) []watchers.PodScope {
	var out []watchers.PodScope
	for _, ns := range namespaces {
		out = append(out, watchers.PodScope{Namespace: ns.Name})
	}
	return out
}
