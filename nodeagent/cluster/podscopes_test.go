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
// pod becomes a scope per selected namespace, or the whole cluster past maxNamespaceScopes;
// a selector that selects nothing reads nothing.
func TestPodScopes(t *testing.T) {
	var namespaces []*corev1.Namespace
	for i := range maxNamespaceScopes + 1 {
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
		{"every pod of too many namespaces", labels.Everything(), labels.Everything(), []watchers.PodScope{{}}},
		{"nothing", teamA, labels.Nothing(), nil},
	} {
		if got := PodScopes(namespaces, c.nsSel, c.podSel); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
