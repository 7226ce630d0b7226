package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/egressd/egressd/nodeagent/leader"
	"github.com/egressd/egressd/test/agent"
	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

func leaseHolder(ctx context.Context, c kubernetes.Interface, ns string) string {
	l, err := c.CoordinationV1().Leases(ns).Get(ctx, leader.LeaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// holds is the condition that the Lease's holder is identity.
func holds(ctx context.Context, c kubernetes.Interface, ns, identity string) func() error {
	return func() error {
		if h := leaseHolder(ctx, c, ns); h != identity {
			return fmt.Errorf("holder %q", h)
		}
		return nil
	}
}

// leads is the condition that p's egressd_leader metric is 1.
func leads(p *agent.Process) func() error {
	return func() error {
		if v, err := p.Metric("egressd_leader"); err != nil || v != "1" {
			return fmt.Errorf("egressd_leader = %q (%v)", v, err)
		}
		return nil
	}
}

// TestPrivilegedAgentLifecycle runs a real agent with the RBAC of deploy/rbac.yaml: it becomes
// ready, serves metrics and health, takes no Lease (its RBAC has none), and SIGTERM stops it
// cleanly within 5 s.
func TestPrivilegedAgentLifecycle(t *testing.T) {
	privileged.Require(t) // the agent loads bpf programs
	cp := controlplane.Shared(t)
	ns := cp.Namespace(t)
	client := cp.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kubeconfig := agentKubeconfig(t, cp, ns, "system:serviceaccount:egressd:egressd")

	a := agent.Start(t, agent.Options{Node: "node-a", Kubeconfig: kubeconfig})
	if err := a.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"egressd_sync_duration_seconds_bucket", "go_goroutines", "process_resident_memory_bytes"} {
		if ok, err := a.HasMetric(m); err != nil || !ok {
			t.Errorf("node-a /metrics lacks %s (err %v)", m, err)
		}
	}
	if ok, _ := a.HasMetric("egressd_leader"); ok {
		t.Errorf("the agent exports egressd_leader: it elects no leader")
	}
	if code, body, err := a.Get("/healthz"); err != nil || code != 200 {
		t.Errorf("/healthz = %d %q, %v", code, body, err)
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
	if h := leaseHolder(ctx, client, ns); h != "" {
		t.Errorf("Lease holder %q: no controller ran", h)
	}
}

// TestPrivilegedControllerLifecycle runs two replicas of egressd controller with the RBAC of
// deploy/controller-rbac.yaml: the first takes the Lease and leads; the second, ready as a
// standby, does not take it while the first runs; SIGTERM stops the first cleanly within 5 s
// and releases the Lease before it exits, so the standby need not wait for it to expire.
func TestPrivilegedControllerLifecycle(t *testing.T) {
	cp := controlplane.Shared(t)
	ns := cp.Namespace(t)
	client := cp.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kubeconfig := controllerKubeconfig(t, cp, ns, "system:serviceaccount:egressd:egressd-controller")
	// Three times the shipped timers (1 s, 600 ms): on a loaded 2-core CI machine a leader can
	// miss a 1 s Lease and rightly lose it, which is not what this test is about.
	timers := []string{"--leader-election-lease-duration=3s", "--leader-election-renew-deadline=2s", "--leader-election-retry-period=150ms"}

	a := agent.StartController(t, agent.ControllerOptions{Name: "ctl-a", Kubeconfig: kubeconfig, LeaderNamespace: ns, Args: timers})
	if err := a.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "ctl-a holds the Lease", 20*time.Second, holds(ctx, client, ns, "ctl-a"))
	poll.Eventually(t, "ctl-a leads", 10*time.Second, leads(a))
	for _, m := range []string{"egressd_controller_build_info", "go_goroutines"} {
		if ok, err := a.HasMetric(m); err != nil || !ok {
			t.Errorf("ctl-a /metrics lacks %s (err %v)", m, err)
		}
	}
	b := agent.StartController(t, agent.ControllerOptions{Name: "ctl-b", Kubeconfig: kubeconfig, LeaderNamespace: ns, Args: timers})
	if err := b.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// Two Lease durations of ctl-b: it must keep seeing ctl-a as the holder (the 6 s that
	// this lasts are what is tested, not a wait for something to happen).
	for range 40 {
		if h := leaseHolder(ctx, client, ns); h != "ctl-a" {
			t.Fatalf("Lease holder changed to %q while ctl-a runs", h)
		}
		if v, _ := b.Metric("egressd_leader"); v != "0" {
			t.Fatalf("ctl-b egressd_leader = %q while ctl-a leads", v)
		}
		time.Sleep(150 * time.Millisecond)
	}
	took, err := a.Terminate(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := a.ExitCode(); code != 0 {
		t.Fatalf("ctl-a exited with %d after SIGTERM", code)
	}
	t.Logf("ctl-a stopped %s after SIGTERM", took.Round(time.Millisecond))
	if !strings.Contains(a.Log(), "egressd controller stopped") {
		t.Errorf("ctl-a log does not say it stopped cleanly")
	}
	// Released, not left to expire: the moment ctl-a has exited the Lease names no longer it.
	l, err := client.CoordinationV1().Leases(ns).Get(ctx, leader.LeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h != nil && *h == "ctl-a" {
		t.Fatalf("ctl-a exited still holding the Lease: it did not release it")
	}
	start := time.Now()
	poll.Eventually(t, "ctl-b takes the Lease", 10*time.Second, holds(ctx, client, ns, "ctl-b"))
	poll.Eventually(t, "ctl-b leads", 5*time.Second, leads(b))
	t.Logf("ctl-b took the Lease %s after ctl-a exited", time.Since(start).Round(time.Millisecond))
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
		p := agent.Start(t, agent.Options{Node: "bad", Kubeconfig: "/nonexistent", Args: args})
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
