package leader

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes/fake"
)

// The holder of the Lease is exported as this replica observes it.
func TestLeaderHolderMetric(t *testing.T) {
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
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = testutil.CollectAndCompare(m.Holder, strings.NewReader(want)); err == nil {
			return
		}
	}
	t.Errorf("egressd_leader_holder never named ctl-a@node-a alone: %v", err)
}
