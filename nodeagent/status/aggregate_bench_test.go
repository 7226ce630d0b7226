package status

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/egressd/egressd/api/generated/clientset/versioned/fake"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// BenchmarkAggregatorReconcile is one reconcile of the scale harness's cluster with every
// status settled: 10,000 EgressFirewalls and 1,000 EgressQoS, two nodes with agents. The
// leader reconciles at every change of any of them, so this bounds how often it can.
func BenchmarkAggregatorReconcile(b *testing.B) {
	applied := []string{"n1: " + fwApplied, "n2: " + fwApplied}
	objs := []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
		nodeReportOf("n1", "200000"), nodeReportOf("n2", "200000"),
	}
	for i := range 10000 {
		objs = append(objs, &ovnv1.EgressFirewall{
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%05d", i), Name: "default", UID: "u", Generation: 1, ResourceVersion: fmt.Sprint(1000 + i)},
			Status:     ovnv1.EgressFirewallStatus{Status: fwApplied, Messages: applied},
		})
	}
	for i := range 1000 {
		var conds []metav1.Condition
		for _, n := range []string{"n1", "n2"} {
			conds = append(conds, metav1.Condition{Type: qosZonePrefix + n, Status: metav1.ConditionTrue, Reason: reasonSuccess, Message: qosApplied})
		}
		objs = append(objs, &ovnv1.EgressQoS{
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%05d", i), Name: "default", UID: "u", Generation: 1, ResourceVersion: fmt.Sprint(20000 + i)},
			Status:     ovnv1.EgressQoSStatus{Status: qosApplied, Conditions: conds},
		})
	}
	snap, _ := watcherstest.Updatable(objs...)
	client := fake.NewSimpleClientset()
	a := &Aggregator{Client: client, Snapshot: snap, PerNodeUpTo: 100, Log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	a.reconcile(ctx)
	if n := len(client.Actions()); n != 0 {
		b.Fatalf("settled statuses written again: %d requests", n)
	}
	b.ReportAllocs()
	for b.Loop() {
		a.reconcile(ctx)
	}
}
