package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/egressd/egressd/test/agent"
	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/privileged"
)

// BenchmarkPrivilegedAgentMemory measures a real egressd's memory with 1,000 namespaces and 10,000 pods
// (10 per namespace, realistic specs, Running and Ready with IPs) and 100 nodes in the API
// server: resident set size and Go heap in use once its caches have synced, against an agent
// started on the nearly empty cluster. Run with: make bench-memory.
func BenchmarkPrivilegedAgentMemory(b *testing.B) {
	privileged.Require(b)
	const namespaces, podsPerNS, nodes = 1000, 10, 100
	cp := controlplane.Shared(b)
	ctx := context.Background()
	kubeconfig, err := cp.KubeconfigFor("egressd-bench", "system:masters")
	if err != nil {
		b.Fatal(err)
	}
	baseline := agent.Start(b, agent.Options{Node: "baseline", Kubeconfig: kubeconfig})
	if err := baseline.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	rss0, heap0 := memory(b, baseline)

	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	client := kubernetes.NewForConfigOrDie(cfg)
	start := time.Now()
	populate(b, client, namespaces, podsPerNS, nodes)
	b.Logf("created %d namespaces, %d pods, %d nodes in %s", namespaces, namespaces*podsPerNS, nodes, time.Since(start).Round(time.Second))

	loaded := agent.Start(b, agent.Options{Node: "loaded", Kubeconfig: kubeconfig})
	start = time.Now()
	if err := loaded.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	b.Logf("agent ready (caches synced, first sync) %s after start", time.Since(start).Round(time.Millisecond))
	time.Sleep(3 * time.Second)
	rss1, heap1 := memory(b, loaded)
	pods := float64(namespaces * podsPerNS)
	b.ReportMetric(rss0/1e6, "MB-rss-empty")
	b.ReportMetric(rss1/1e6, "MB-rss-10kpods")
	b.ReportMetric(heap1/1e6, "MB-heap-10kpods")
	b.ReportMetric((heap1-heap0)/pods, "B-heap/pod")
	b.ReportMetric((rss1-rss0)/pods, "B-rss/pod")
}

func memory(b *testing.B, p *agent.Process) (rss, heap float64) {
	b.Helper()
	for name, v := range map[string]*float64{"process_resident_memory_bytes": &rss, "go_memstats_heap_inuse_bytes": &heap} {
		s, err := p.Metric(name)
		if err != nil || s == "" {
			b.Fatalf("%s: %q %v", name, s, err)
		}
		if *v, err = strconv.ParseFloat(s, 64); err != nil {
			b.Fatal(err)
		}
	}
	return rss, heap
}

// populate creates the objects with 32 workers; pods get the status a kubelet would write.
func populate(b *testing.B, c kubernetes.Interface, namespaces, podsPerNS, nodes int) {
	ctx := context.Background()
	work := make(chan func() error)
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for range 32 {
		wg.Go(func() {
			for f := range work {
				if err := f(); err != nil {
					once.Do(func() { firstErr = err })
				}
			}
		})
	}
	for i := range nodes {
		work <- func() error {
			_, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-node-%d", i), Labels: map[string]string{"kubernetes.io/hostname": fmt.Sprintf("bench-node-%d", i)}},
				Spec:       corev1.NodeSpec{PodCIDRs: []string{fmt.Sprintf("10.%d.%d.0/24", 100+i/250, i%250)}},
			}, metav1.CreateOptions{})
			return err
		}
	}
	for n := range namespaces {
		work <- func() error {
			name := fmt.Sprintf("bench-%04d", n)
			if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": fmt.Sprint(n % 20)}}}, metav1.CreateOptions{}); err != nil {
				return err
			}
			for p := range podsPerNS {
				pod := benchPod(name, p, fmt.Sprintf("bench-node-%d", (n*podsPerNS+p)%nodes))
				created, err := c.CoreV1().Pods(name).Create(ctx, pod, metav1.CreateOptions{})
				if err != nil {
					return err
				}
				idx := n*podsPerNS + p
				created.Status = corev1.PodStatus{
					Phase:  corev1.PodRunning,
					PodIP:  fmt.Sprintf("10.%d.%d.%d", 100+idx/62500, idx/250%250, idx%250+1),
					HostIP: "192.0.2.1",
					Conditions: []corev1.PodCondition{
						{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()},
						{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()},
						{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()},
					},
					ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, Image: "registry.example/app:v1.2.3", ImageID: "registry.example/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", ContainerID: "containerd://0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}},
				}
				created.Status.PodIPs = []corev1.PodIP{{IP: created.Status.PodIP}}
				if _, err := c.CoreV1().Pods(name).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
					return err
				}
			}
			return nil
		}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}

// benchPod looks like a Deployment's pod: labels, owner, annotations and a container spec.
func benchPod(ns string, i int, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("app-7d9f8c6b5-%05d", i), Namespace: ns,
			Labels:      map[string]string{"app": "web", "pod-template-hash": "7d9f8c6b5", "tier": fmt.Sprint(i % 3)},
			Annotations: map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-01T10:00:00Z", "prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
		},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.example/app:v1.2.3",
				Args:  []string{"--listen=:8080", "--metrics=:9090", "--log-level=info"},
				Env:   []corev1.EnvVar{{Name: "POD_NAME", Value: "x"}, {Name: "MODE", Value: "production"}, {Name: "CACHE_SIZE", Value: "512"}},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
			}},
		},
	}
}
