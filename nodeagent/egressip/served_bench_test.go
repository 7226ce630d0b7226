package egressip

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// BenchmarkServedPods: an egress node of the scale harness's cluster (10,000 namespaces, 100
// assigned EgressIPs, each selecting every pod of the namespaces labelled for it) names the
// scopes it serves: what a sync paid before the scopes were kept while their inputs stay.
func BenchmarkServedPods(b *testing.B) {
	objs := []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{AssignableLabel: ""}}}}
	for i := range 10000 {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns-%05d", i),
			Labels: map[string]string{"egressip": fmt.Sprint(i % 150)}}})
	}
	for i := range 100 {
		objs = append(objs, &ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("e%d", i)}, Spec: ovnv1.EgressIPSpec{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egressip": fmt.Sprint(i)}}},
			Status: ovnv1.EgressIPStatus{Items: []ovnv1.EgressIPStatusItem{{Node: "n", EgressIP: fmt.Sprintf("192.0.2.%d", i)}}}})
	}
	snap := watcherstest.Snapshot(objs...)
	b.Run("Named", func(b *testing.B) {
		for b.Loop() {
			if _, err := (&Compiler{}).ServedPods(snap, "n"); err != nil {
				b.Fatal(err)
			}
		}
	})
	// An assignment changed, the namespaces did not: the Compiler knows what each selector picks.
	b.Run("NamespacesKept", func(b *testing.B) {
		kept := *snap
		kept.Generations = watchers.NewGenerations(&corev1.Namespace{})
		var c Compiler
		if _, err := c.ServedPods(&kept, "n"); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := c.ServedPods(&kept, "n"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
