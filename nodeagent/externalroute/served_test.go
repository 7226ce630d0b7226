package externalroute

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// TestServedPodsAreTheDynamicHopsGateways: every node reads the gateway pods of the policies'
// dynamic hops (their pod selector cluster-wide, or each selected namespace when it selects
// every pod); a hop with an invalid selector reads nothing; the legacy annotations need every
// pod.
func TestServedPodsAreTheDynamicHopsGateways(t *testing.T) {
	hop := func(pod, ns map[string]string) *ovnv1.DynamicHop {
		return &ovnv1.DynamicHop{PodSelector: metav1.LabelSelector{MatchLabels: pod}, NamespaceSelector: metav1.LabelSelector{MatchLabels: ns}}
	}
	invalid := &ovnv1.DynamicHop{PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}}
	policy := &ovnv1.AdminPolicyBasedExternalRoute{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: ovnv1.ExternalRouteSpec{
		NextHops: ovnv1.ExternalNextHops{DynamicHops: []*ovnv1.DynamicHop{
			hop(map[string]string{"app": "gw"}, map[string]string{"gw": "yes"}),
			hop(nil, map[string]string{"gw": "yes"}),
			invalid,
		}}}}
	snap := watcherstest.Snapshot(policy,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gws", Labels: map[string]string{"gw": "yes"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}})
	got, err := (&Compiler{}).ServedPods(snap)
	if want := []watchers.PodScope{{Selector: "app=gw"}, {Namespace: "gws"}}; err != nil || !slices.Equal(got, want) {
		t.Errorf("scopes %v (%v), want %v", got, err, want)
	}
	got, err = (&Compiler{Legacy: true}).ServedPods(snap)
	if want := []watchers.PodScope{{}}; err != nil || !slices.Equal(got, want) {
		t.Errorf("with the legacy annotations: scopes %v (%v), want every pod", got, err)
	}
}
