package leader

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes/fake"
)

// The holder of the Lease is exported as this replica observes it. In a bubble: the fake
// clientset answers at once, so once everything is quiescent the Lease has been taken and
// OnNewLeader has run.
func TestLeaderHolderMetric(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewMetrics()
		ctx, cancel := context.WithCancel(t.Context())
		e := &LeaderElection{Client: fake.NewClientset(), Namespace: "egressd", Identity: "ctl-a@node-a", Metrics: m,
			Log: slog.New(slog.DiscardHandler), LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}
		done := make(chan error)
		go func() { done <- e.Run(ctx) }()
		defer func() { cancel(); <-done }()
		want := `# HELP egressd_leader_holder 1 for the replica holding the leader Lease (its identity: pod name, and node), as this replica last observed it.
# TYPE egressd_leader_holder gauge
egressd_leader_holder{identity="ctl-a@node-a"} 1
`
		synctest.Wait()
		if err := testutil.CollectAndCompare(m.Holder, strings.NewReader(want)); err != nil {
			t.Errorf("egressd_leader_holder does not name ctl-a@node-a alone: %v", err)
		}
	})
}
