package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/egressd/egressd/test/kube"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// BenchmarkPrivilegedEgressIPScale: EgressIP at scale, with one real pod on node 0 (steered)
// among pods of a node that runs no agent (API objects with addresses: the egress node SNATs
// them all).
//   - Programming: an EgressIP selecting the real pod and 1000 others, created while the real
//     pod streams to the web host: the time to status.items, and to the web host seeing the
//     real pod's stream with the egress IP.
//   - Cost: 99 more EgressIPs (100 objects, 10,009 selected pods in all, every one on node 1):
//     the time until node 1 SNATs them all, then the real pod's UDP flood rate through node 1
//     (steered, SNATed, leak-guarded) against the rate on the same path without EgressIP
//     (policy-routed to node 1 and masqueraded there by hand), best of 3 runs each.
//
// Run with: make bench-egressip.
func BenchmarkPrivilegedEgressIPScale(b *testing.B) {
	privileged.Require(b)
	e := newEIPLab(b, 2)
	ctx := context.Background()
	n1 := e.Nodes[1]
	p := addPod(b, e.Nodes[0], e.ns, "flood", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	count, err := e.web.CountUDP(9000)
	if err != nil {
		b.Fatal(err)
	}
	sink := lab.HostPort(web4, 9000)
	best := func(what string) float64 {
		r := 0.0
		for range 3 {
			r = max(r, floodRate(b, p, sink, count, what))
		}
		return r
	}
	// The baseline takes the same path without EgressIP: the pod's packets policy-routed to
	// node 1 and masqueraded there, as any plain node forwards and NATs (the extra hop costs
	// the sender's CPU, as the whole path runs in its system calls).
	n0 := e.Nodes[0]
	plain := []string{"ip rule add from " + p.IPv4.String() + " lookup 250 priority 100",
		"ip route add default via " + n1.IPv4.String() + " table 250"}
	if err := n0.NS.Script(plain...); err != nil {
		b.Fatal(err)
	}
	if err := n1.NS.Script("nft add table ip benchplain",
		"nft add chain ip benchplain post { type nat hook postrouting priority srcnat - 20 ; }",
		"nft add rule ip benchplain post ip saddr "+p.IPv4.String()+" masquerade"); err != nil {
		b.Fatal(err)
	}
	base := best("plain, via node 1")
	if err := n0.NS.Script("ip rule del from "+p.IPv4.String()+" lookup 250 priority 100", "ip route flush table 250"); err != nil {
		b.Fatal(err)
	}
	if err := n1.NS.Script("nft delete table ip benchplain"); err != nil {
		b.Fatal(err)
	}
	direct := best("no EgressIP, direct")

	cfg := rest.CopyConfig(e.CP.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	bulk := kubernetes.NewForConfigOrDie(cfg)
	far := phantomNode(b, bulk, "bench-far-"+e.ID, "10.250.0.0/16")
	seq := 0
	phantomPods(b, bulk, far, e.ns, map[string]string{"app": "eip"}, 1000, &seq)

	v4 := netip.MustParseAddr(eip4)
	capture := e.web.Capture()
	defer capture.Stop()
	s, err := p.StreamUDP(webAddr(v4), 2*time.Millisecond)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	name := e.egressIP(b, "scale", "eip", v4)
	placed := e.waitPlaced(b, name, time.Minute, map[*lab.Node]netip.Addr{n1: v4})
	port := s.LocalPort()
	got, ok := capture.Await(start, time.Minute, func(c lab.Captured) bool {
		return c.ForHost && c.Proto == "udp" && c.Src == v4 && c.SrcPort == port
	})
	_, _ = s.Stop()
	if !ok {
		b.Fatalf("the real pod's stream never arrived with %s", v4)
	}
	b.Logf("EgressIP selecting 1001 pods: status.items %s after create, the real pod's first datagram with the egress IP %s after create",
		placed.Sub(start).Round(time.Millisecond), got.At.Sub(start).Round(time.Millisecond))
	b.ReportMetric(float64(placed.Sub(start).Milliseconds()), "ms-1001-pods-create-to-assigned")
	b.ReportMetric(float64(got.At.Sub(start).Milliseconds()), "ms-1001-pods-create-to-first-packet")

	// 99 more objects, one namespace of 91 pods each, an egress IP of the fabric each.
	k, err := kube.NewClient(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var spare []int
	for i := 20; i < 100; i++ {
		spare = append(spare, i)
	}
	for i := 202; i < 255; i++ {
		spare = append(spare, i)
	}
	start = time.Now()
	var names []string
	for i := range 99 {
		ns := e.CP.Namespace(b)
		phantomPods(b, bulk, far, ns, nil, 91, &seq)
		name := fmt.Sprintf("scale-%d-%s", i, e.ns)
		names = append(names, name)
		doc := fmt.Sprintf(`apiVersion: k8s.ovn.org/v1
kind: EgressIP
metadata: {name: %s}
spec:
  egressIPs: ["172.18.0.%d"]
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: %s}
`, name, spare[i], ns)
		if err := k.Apply(ctx, "", doc); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for _, n := range names {
			_ = k.Delete(context.Background(), "k8s.ovn.org/v1", "EgressIP", "", n)
		}
	})
	b.Logf("99 EgressIPs and 9009 pods created in %s", time.Since(start).Round(time.Millisecond))
	const selected = 1000 + 99*91 + 1
	var programmed time.Duration
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if n := snatElements(b, n1); n >= selected {
			programmed = time.Since(start)
			break
		} else if time.Now().After(deadline) {
			b.Fatalf("node 1 SNATs %d pods after 3 min, want %d", n, selected)
		}
	}
	b.Logf("node 1 SNATs all %d pods %s after the first of the 99 objects was created", selected, programmed.Round(time.Millisecond))
	b.ReportMetric(float64(programmed.Milliseconds()), "ms-99-objects-9009-pods-create-to-programmed")

	snatted := `egressd_egressip_snat_packets_total{egress_ip="` + eip4 + `"}`
	before := sample(b, n1, snatted)
	with := best("steered and SNATed")
	if after := sample(b, n1, snatted); after-before < with {
		b.Fatalf("the flood was not SNATed on node 1: %s went from %v to %v", snatted, before, after)
	}
	b.Logf("UDP flood through the egress node with 100 objects and %d selected pods: %.0f packets/s, plainly routed and masqueraded through it %.0f: ratio %.2f (leaving from its own node: %.0f)",
		selected, with, base, with/base, direct)
	b.ReportMetric(base, "pps-plain-via-egress-node")
	b.ReportMetric(direct, "pps-direct")
	b.ReportMetric(with, "pps-100-objects-10k-pods")
	b.ReportMetric(with/base, "ratio-egressip")
}

// phantomNode creates a Node object no agent runs on, with podCIDR, and returns its name.
func phantomNode(b *testing.B, c kubernetes.Interface, name, podCIDR string) string {
	b.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}}}
	if _, err := c.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// phantomPods creates n Running pods bound to node in namespace ns, with addresses of
// 10.250.0.0/16 numbered from *seq on, 16 at a time.
func phantomPods(b *testing.B, c kubernetes.Interface, node, ns string, labels map[string]string, n int, seq *int) {
	b.Helper()
	ctx := context.Background()
	first := *seq
	*seq += n
	work := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("far-%d", i), Namespace: ns, Labels: labels},
					Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
				created, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
				if err != nil {
					b.Error(err)
					continue
				}
				ip := fmt.Sprintf("10.250.%d.%d", i/250, i%250+1)
				created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
				if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := first; i < first+n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
}

// snatElements counts the IPv4 pods node n SNATs to an egress IP.
func snatElements(b *testing.B, n *lab.Node) int {
	b.Helper()
	out, err := n.NS.Run("nft", "-j", "list", "map", "inet", "egressd", "egressip_snat4")
	if err != nil {
		return 0
	}
	var doc struct {
		Nftables []struct {
			Map *struct {
				Elem []json.RawMessage `json:"elem"`
			} `json:"map"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		b.Fatal(err)
	}
	for _, o := range doc.Nftables {
		if o.Map != nil {
			return len(o.Map.Elem)
		}
	}
	return 0
}
