package egressip

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// A failover shows as a move off the old node, and the assignment follows the IP.
func TestMetricsFollowAssignments(t *testing.T) {
	m := NewMetrics()
	first := []ovnv1.EgressIPStatusItem{{Node: "n1", EgressIP: "192.0.2.100"}}
	m.record("eip", nil, first)
	m.record("eip", first, []ovnv1.EgressIPStatusItem{{Node: "n2", EgressIP: "192.0.2.100"}})
	if got := testutil.ToFloat64(m.Moves.WithLabelValues("n1")); got != 1 {
		t.Errorf("moves off n1 = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Assigned.WithLabelValues("eip", "n2", "192.0.2.100")); got != 1 {
		t.Errorf("assigned on n2 = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.Assigned); n != 1 {
		t.Errorf("%d assignment series, want 1 (n1's removed)", n)
	}
}
