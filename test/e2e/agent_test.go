package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/egressd/egressd/nodeagent"
	"github.com/egressd/egressd/test/agent"
	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

func leaseHolder(ctx context.Context, c kubernetes.Interface, ns string) string {
	l, err := c.CoordinationV1().Leases(ns).Get(ctx, nodeagent.LeaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// holds is the condition that the Lease's holder is node.
func holds(ctx context.Context, c kubernetes.Interface, ns, node string) func() error {
	return func() error {
		if h := leaseHolder(ctx, c, ns); h != node {
			return fmt.Errorf("holder %q", h)
		}
		return nil
	}
}

// leads is the condition that a's egressd_leader metric is 1.
func leads(a *agent.Process) func() error {
	return func() error {
		if v, err := a.Metric("egressd_leader"); err != nil || v != "1" {
			return fmt.Errorf("egressd_leader = %q (%v)", v, err)
		}
		return nil
	}
}

// TestPrivilegedAgentLifecycle runs two real agents with the RBAC of deploy/rbac.yaml: the first becomes
// ready, takes the Lease and serves metrics; the second does not take the Lease while the first
// runs; SIGTERM stops the first cleanly within 5 s and hands the Lease over.
func TestPrivilegedAgentLifecycle(t *testing.T) {
	privileged.Require(t) // the agent loads bpf programs
	cp := controlplane.Shared(t)
	ns := cp.Namespace(t)
	client := cp.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kubeconfig := agentKubeconfig(t, cp, ns, "system:serviceaccount:egressd:egressd")

	a := agent.Start(t, agent.Options{Node: "node-a", Kubeconfig: kubeconfig, LeaderNamespace: ns})
	if err := a.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "node-a holds the Lease", 20*time.Second, holds(ctx, client, ns, "node-a"))
	poll.Eventually(t, "node-a leads", 10*time.Second, leads(a))
	for _, m := range []string{"egressd_sync_duration_seconds_bucket", "go_goroutines", "process_resident_memory_bytes"} {
		if ok, err := a.HasMetric(m); err != nil || !ok {
			t.Errorf("node-a /metrics lacks %s (err %v)", m, err)
		}
	}
	if code, body, err := a.Get("/healthz"); err != nil || code != 200 {
		t.Errorf("/healthz = %d %q, %v", code, body, err)
	}

	b := agent.Start(t, agent.Options{Node: "node-b", Kubeconfig: kubeconfig, LeaderNamespace: ns})
	if err := b.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// Several retry periods of node-b: it must keep seeing node-a as the holder (the 3 s that
	// this lasts are what is tested, not a wait for something to happen).
	for range 20 {
		if h := leaseHolder(ctx, client, ns); h != "node-a" {
			t.Fatalf("Lease holder changed to %q while node-a runs", h)
		}
		if v, _ := b.Metric("egressd_leader"); v != "0" {
			t.Fatalf("node-b egressd_leader = %q while node-a leads", v)
		}
		time.Sleep(150 * time.Millisecond)
	}

	took, err := a.Terminate(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := a.ExitCode(); code != 0 {
		t.Fatalf("node-a exited with %d after SIGTERM", code)
	}
	t.Logf("node-a stopped %s after SIGTERM", took.Round(time.Millisecond))
	if !strings.Contains(a.Log(), "egressd stopped") {
		t.Errorf("node-a log does not say it stopped cleanly")
	}
	// The Lease was released on shutdown: node-b takes it well before it would expire (4 s).
	start := time.Now()
	poll.Eventually(t, "node-b takes the Lease", 10*time.Second, holds(ctx, client, ns, "node-b"))
	poll.Eventually(t, "node-b leads", 5*time.Second, leads(b))
	t.Logf("node-b took the Lease %s after node-a exited", time.Since(start).Round(time.Millisecond))
	if _, err := b.Terminate(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestAgentBadFlags: bad values fail fast with a message naming the flag.
func TestAgentBadFlags(t *testing.T) {
	cases := map[string][]string{
		"--cluster-cidr":         {"--node-name", "n", "--cluster-cidr", "10.0.0.0/33"},
		"--metrics-bind-address": {"--node-name", "n", "--metrics-bind-address", "nonsense"},
		"--node-name":            {"--node-name", ""},
		"--bpf-pin-root":         {"--node-name", "n", "--bpf-pin-root", "relative/path"},
	}
	for flag, args := range cases {
		p := agent.Start(t, agent.Options{Node: "bad", Kubeconfig: "/nonexistent", LeaderNamespace: "x", Args: args})
		select {
		case <-p.Exited():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: egressd did not exit", flag)
		}
		if p.ExitCode() != 2 || !strings.Contains(p.Log(), flag) {
			t.Errorf("%s: exit %d, log %q", flag, p.ExitCode(), p.Log())
		}
	}
}
