package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/egressd/egressd/api/generated/clientset/versioned"
	"github.com/egressd/egressd/test/kube"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// firewallYAML is an EgressFirewall of n rules: n-1 allows of unrelated /24s, then last.
func firewallYAML(n int, last string) string {
	var b strings.Builder
	b.WriteString("apiVersion: k8s.ovn.org/v1\nkind: EgressFirewall\nmetadata: {name: default}\nspec:\n  egress:\n")
	for i := range n - 1 {
		fmt.Fprintf(&b, "  - {type: Allow, to: {cidrSelector: 10.%d.%d.0/24}}\n", 100+i/250, i%250)
	}
	b.WriteString("  - " + last + "\n")
	return b.String()
}

// waitState probes until the pod's TCP connection to dst is dropped (blocked) or passes, and
// returns when the first probe that saw it began: the state was in force by then (a blocked
// probe only knows after its 30 ms timeout, which would otherwise count as latency).
func waitState(p *lab.Pod, dst string, blocked bool, timeout time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		start := time.Now()
		r := p.TCP(dst, lab.ClientOptions{Timeout: 30 * time.Millisecond})
		if (r.Outcome == lab.Timeout) == blocked {
			return start, true
		}
	}
	return time.Time{}, false
}

// BenchmarkPrivilegedFirewallApply measures, on a lab node: the time from creating an
// 8000-rule EgressFirewall to the node dropping what its last rule denies, and to its status
// "EgressFirewall Rules applied"; then, with 1000 namespaces holding EgressFirewalls, the time
// from a one-rule change to enforcement, over 100 changes. Run with: make bench-firewall.
func BenchmarkPrivilegedFirewallApply(b *testing.B) {
	privileged.Require(b)
	l := lab.New(b, lab.Options{Nodes: 1, Agents: true})
	ctx := context.Background()
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10"); err != nil {
		b.Fatal(err)
	}
	ns := l.CP.Namespace(b)
	p := addPod(b, l.Nodes[0], ns, "p", lab.PodOptions{})
	if _, ok := waitState(p, "203.0.113.10:80", false, 5*time.Second); !ok {
		b.Fatal("no connectivity before the firewall")
	}

	doc := firewallYAML(8000, "{type: Deny, to: {cidrSelector: 203.0.113.0/24}}")
	objs, _ := kube.Decode(doc)
	sum0, n0 := latencySum(b, l)
	start := time.Now()
	if _, err := l.Kube.Create(ctx, ns, objs[0]); err != nil {
		b.Fatal(err)
	}
	created := time.Now()
	b.ReportMetric(float64(created.Sub(start).Milliseconds()), "ms-8000-rules-api-create-call")
	enforced, ok := waitState(p, "203.0.113.10:80", true, 30*time.Second)
	if !ok {
		b.Fatal("8000-rule firewall not enforced within 30 s")
	}
	b.ReportMetric(float64(enforced.Sub(created).Milliseconds()), "ms-8000-rules-created-to-enforced")
	// The agent's own share: from the object reaching it to the kernel programmed (its
	// latency histogram; the status write that follows is a second sync).
	if sum1, n1 := latencySum(b, l); n1 > n0 {
		b.ReportMetric((sum1-sum0)/(n1-n0)*1000, "ms-8000-rules-agent-event-to-programmed")
	}
	var applied time.Duration
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		ef, err := l.Kube.Get(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default")
		if st, _, _ := unstructuredStrings(ef.Object, "status", "messages"); err == nil && len(st) > 0 {
			if s, _ := ef.Object["status"].(map[string]any)["status"].(string); s == fwApplied {
				applied = time.Since(start)
				break
			}
		}
	}
	b.ReportMetric(float64(enforced.Sub(start).Milliseconds()), "ms-8000-rules-create-to-enforced")
	b.ReportMetric(float64(applied.Milliseconds()), "ms-8000-rules-create-to-status-applied")

	// 1000 namespaces with a 10-rule firewall each.
	cfg := rest.CopyConfig(l.CP.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	bulk, err := kube.NewClient(cfg)
	if err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	firewalledNamespaces(b, l, 1000, "bench-fw")
	b.Logf("1000 namespaces with EgressFirewalls created in %s", time.Since(start).Round(time.Millisecond))
	waitFirewallsApplied(b, l)
	b.Logf("all firewalls applied on the node %s after creation", time.Since(start).Round(time.Second))

	// One-rule changes of a 10-rule firewall in one more namespace, its pod probing.
	ns2 := l.CP.Namespace(b)
	p2 := addPod(b, l.Nodes[0], ns2, "p2", lab.PodOptions{})
	if err := l.Kube.Apply(ctx, ns2, firewallYAML(10, "{type: Allow, to: {cidrSelector: 203.0.113.0/24}}")); err != nil {
		b.Fatal(err)
	}
	if _, ok := waitState(p2, "203.0.113.10:80", false, 10*time.Second); !ok {
		b.Fatal("second namespace not reachable")
	}
	sum0, n0 = latencySum(b, l)
	sumPrev, nPrev := sum0, n0
	// 100 changes, so that the 99th percentile is one of them, not the maximum of a few.
	var lat, calls, agent []time.Duration
	for i := range 100 {
		last := "{type: Deny, to: {cidrSelector: 203.0.113.0/24}}"
		if i%2 == 1 {
			last = "{type: Allow, to: {cidrSelector: 203.0.113.0/24}}"
		}
		doc := firewallYAML(10, last)
		start := time.Now()
		if err := bulk.Apply(ctx, ns2, doc); err != nil { // bulk: no client-side throttling
			b.Fatal(err)
		}
		calls = append(calls, time.Since(start))
		at, ok := waitState(p2, "203.0.113.10:80", i%2 == 0, 10*time.Second)
		if !ok {
			b.Fatalf("change %d not enforced within 10 s", i)
		}
		lat = append(lat, at.Sub(start))
		// The agent's share of this change (its syncs since the previous one), to tell a slow
		// agent from a slow API server or a busy machine in the tail.
		s1, c1 := latencySum(b, l)
		if c1 > nPrev {
			agent = append(agent, time.Duration((s1-sumPrev)/(c1-nPrev)*float64(time.Second)))
		}
		sumPrev, nPrev = s1, c1
	}
	slices.Sort(lat)
	slices.Sort(calls)
	b.ReportMetric(float64(calls[len(calls)/2].Milliseconds()), "ms-one-rule-change-api-update-call-p50")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "ms-one-rule-change-p50-1000ns")
	b.ReportMetric(float64(p99(lat).Milliseconds()), "ms-one-rule-change-p99-1000ns")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "ms-one-rule-change-max-1000ns")
	if len(agent) > 0 {
		b.ReportMetric(float64(p99(agent).Milliseconds()), "ms-agent-change-to-programmed-p99")
	}
	// The agent's own share: from the change reaching it to the kernel programmed.
	sum1, n1 := latencySum(b, l)
	if n1 > n0 {
		b.ReportMetric((sum1-sum0)/(n1-n0)*1000, "ms-agent-change-to-programmed-mean")
	}
	if v, err := l.Nodes[0].Agent.Sample("egressd_egressfirewalls"); err == nil {
		b.Logf("egressd_egressfirewalls on the node: %s", v)
	}
}

// p99 is the 99th percentile of xs (nearest rank), which it sorts.
func p99(xs []time.Duration) time.Duration {
	slices.Sort(xs)
	return xs[max((len(xs)*99+99)/100-1, 0)]
}

func latencySum(b *testing.B, l *lab.Lab) (sum, count float64) {
	s, _ := l.Nodes[0].Agent.Sample("egressd_programming_latency_seconds_sum")
	c, _ := l.Nodes[0].Agent.Sample("egressd_programming_latency_seconds_count")
	fmt.Sscan(s, &sum)
	fmt.Sscan(c, &count)
	return sum, count
}

// firewalledNamespaces creates n namespaces named <prefix>-<lab>-<i>, each with a 10-rule
// EgressFirewall, 16 at a time, without client-side throttling.
func firewalledNamespaces(b *testing.B, l *lab.Lab, n int, prefix string) {
	b.Helper()
	ctx := context.Background()
	cfg := rest.CopyConfig(l.CP.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	bulk, err := kube.NewClient(cfg)
	if err != nil {
		b.Fatal(err)
	}
	bulkCore := kubernetes.NewForConfigOrDie(cfg)
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				name := fmt.Sprintf("%s-%s-%04d", prefix, l.ID, i)
				if _, err := bulkCore.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
					b.Error(err)
					continue
				}
				if err := bulk.Apply(ctx, name, firewallYAML(10, "{type: Deny, to: {cidrSelector: 0.0.0.0/0}}")); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// waitFirewallsApplied waits for the steady state: every firewall programmed and its status
// written (no status churn left).
func waitFirewallsApplied(b *testing.B, l *lab.Lab) {
	b.Helper()
	egress := versioned.NewForConfigOrDie(l.CP.Config)
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		list, err := egress.K8sOVNV1().EgressFirewalls("").List(context.Background(), metav1.ListOptions{})
		pending := 0
		for _, ef := range list.Items {
			if ef.Status.Status != fwApplied {
				pending++
			}
		}
		if err == nil && pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d firewalls without status %q after 3 min (%v)", pending, fwApplied, err)
		}
	}
}
