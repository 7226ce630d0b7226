package egressip

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// A failover shows as a move off the old node, and the assignment follows the IP.
func TestMetricsFollowAssignments(t *testing.T) {
	m := NewMetrics()
	first := []ovnv1.EgressIPStatusItem{{Node: "n1", EgressIP: "192.0.2.100"}}
	m.record("eip", nil, first, nil, time.Now())
	m.record("eip", first, []ovnv1.EgressIPStatusItem{{Node: "n2", EgressIP: "192.0.2.100"}}, map[string]time.Time{"n1": time.Now().Add(-300 * time.Millisecond)}, time.Now())
	if got := testutil.ToFloat64(m.Moves.WithLabelValues("n1")); got != 1 {
		t.Errorf("moves off n1 = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Assigned.WithLabelValues("eip", "n2", "192.0.2.100")); got != 1 {
		t.Errorf("assigned on n2 = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.Reassignment); n != 1 {
		t.Errorf("%d reassignment histograms", n)
	}
	if got := histogramSum(t, m); got < 0.3 || got > 1 {
		t.Errorf("reassignment took %v s, want the 0.3 s since n1 was lost", got)
	}
	if n := testutil.CollectAndCount(m.Assigned); n != 1 {
		t.Errorf("%d assignment series, want 1 (n1's removed)", n)
	}
}

func histogramSum(t *testing.T, m *Metrics) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Reassignment.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleSum()
}

// The IPs a plan leaves without a node are counted by object and reason, the last plan only;
// an agent that stops leading exports none.
func TestMetricsCountUnassigned(t *testing.T) {
	m := NewMetrics()
	m.observeUnassigned(Plan{Assignments: []Assignment{
		{Name: "a", Unassigned: []Unassigned{{IP: "192.0.2.1", Reason: ReasonNoMatchingNodeFound}, {IP: "192.0.2.2", Reason: ReasonNoMatchingNodeFound}}},
		{Name: "b", Unassigned: []Unassigned{{IP: "192.0.2.3", Reason: ReasonEgressIPConflict}}},
		{Name: "c", Items: []ovnv1.EgressIPStatusItem{{Node: "n1", EgressIP: "192.0.2.4"}}},
	}})
	if got := testutil.ToFloat64(m.Unassigned.WithLabelValues("a", ReasonNoMatchingNodeFound)); got != 2 {
		t.Errorf("a unassigned = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.Unassigned.WithLabelValues("b", ReasonEgressIPConflict)); got != 1 {
		t.Errorf("b unassigned = %v, want 1", got)
	}
	m.observeUnassigned(Plan{Assignments: []Assignment{{Name: "b", Unassigned: []Unassigned{{IP: "192.0.2.3", Reason: ReasonEgressIPConflict}}}}})
	if n := testutil.CollectAndCount(m.Unassigned); n != 1 {
		t.Errorf("%d unassigned series after a's IPs were placed, want 1", n)
	}
	m.record("c", nil, []ovnv1.EgressIPStatusItem{{Node: "n1", EgressIP: "192.0.2.4"}}, nil, time.Now())
	m.forget()
	if n := testutil.CollectAndCount(m.Unassigned) + testutil.CollectAndCount(m.Assigned); n != 0 {
		t.Errorf("%d leader series after it stopped leading", n)
	}
}
