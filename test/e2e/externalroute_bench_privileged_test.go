package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egressd/egressd/test/frr"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// gatewayLab is one lab node, a destination host (192.0.2.50) and gateways that forward to
// it, with a pod whose UDP streams (one datagram every 2 ms each) the destination captures.
type gatewayLab struct {
	*lab.Lab
	dst     *lab.External
	gws     []*lab.External
	macs    map[string]int // gateway MAC -> index in gws
	pod     *lab.Pod
	streams []*lab.Stream
	capture *lab.Capture
}

func newGatewayLab(b *testing.B, gateways int, agentArgs ...string) *gatewayLab {
	b.Helper()
	l := lab.New(b, lab.Options{Nodes: 1, Agents: true, AgentArgs: agentArgs})
	g := &gatewayLab{Lab: l, macs: map[string]int{}}
	dst, err := l.AddExternal("dst", lab.ExternalOptions{}, "192.0.2.50")
	if err != nil {
		b.Fatal(err)
	}
	for i := range gateways {
		gw, err := l.AddExternal(fmt.Sprintf("gw%d", i+1), lab.ExternalOptions{Forwarding: true})
		if err != nil {
			b.Fatal(err)
		}
		if err := gw.NS.Script("ip route add 192.0.2.50/32 via " + dst.Fabric.String()); err != nil {
			b.Fatal(err)
		}
		g.gws = append(g.gws, gw)
		_, after, _ := strings.Cut(gw.NS.MustRun(b, "ip", "-o", "link", "show", "eth0"), "link/ether ")
		g.macs[strings.Fields(after)[0]] = i
	}
	g.dst = dst
	g.capture = dst.Capture()
	b.Cleanup(g.capture.Stop)
	g.pod = addPod(b, l.Nodes[0], l.CP.Namespace(b), "client", lab.PodOptions{})
	return g
}

// stream replaces the pod's streams with n new ones: a flow's NAT is decided on its first
// packet (masquerade without a policy, the pod IP with one) and stays.
func (g *gatewayLab) stream(b *testing.B, n int) {
	b.Helper()
	for _, s := range g.streams {
		s.Stop()
	}
	g.streams = nil
	for range n {
		s, err := g.pod.StreamUDP("192.0.2.50:80", 2*time.Millisecond)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Stop() })
		g.streams = append(g.streams, s)
	}
}

// applied waits until the policy reports Success.
func (g *gatewayLab) applied(b *testing.B, name string) {
	b.Helper()
	if err := g.Kube.WaitField(context.Background(), "k8s.ovn.org/v1", "AdminPolicyBasedExternalRoute", "", name, "status.status", "Success", 20*time.Second); err != nil {
		b.Fatal(err)
	}
}

// policy applies a policy over the namespaces labelled selector with the given gateways
// (bfd: the first with bfdEnabled), without waiting.
func (g *gatewayLab) policy(b *testing.B, name, selector string, bfd bool, gws ...*lab.External) {
	b.Helper()
	doc := fmt.Sprintf("apiVersion: k8s.ovn.org/v1\nkind: AdminPolicyBasedExternalRoute\nmetadata: {name: %s}\nspec:\n  from:\n    namespaceSelector:\n      matchLabels: {%s}\n  nextHops:\n    static:\n", name, selector)
	for i, gw := range gws {
		doc += fmt.Sprintf("    - {ip: %q, bfdEnabled: %t}\n", gw.Fabric, bfd && i == 0)
	}
	if err := g.Kube.Apply(context.Background(), "", doc); err != nil {
		b.Fatal(err)
	}
}

// via is the gateway (index) each stream's last datagram at the destination came through
// since, -1 for none.
func (g *gatewayLab) via(since time.Time) []int {
	out := make([]int, len(g.streams))
	for i, s := range g.streams {
		out[i] = -1
		port := s.LocalPort()
		for _, c := range g.capture.Packets() {
			if c.ForHost && c.Proto == "udp" && c.SrcPort == port && !c.At.Before(since) {
				if gw, ok := g.macs[c.MAC]; ok {
					out[i] = gw
				}
			}
		}
	}
	return out
}

// settle waits until every stream arrives through a gateway and ok holds for where they go.
func (g *gatewayLab) settle(b *testing.B, what string, ok func(via []int) bool) []int {
	b.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		since := time.Now()
		time.Sleep(100 * time.Millisecond)
		via := g.via(since)
		if !slices.Contains(via, -1) && ok(via) {
			return via
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: streams through gateways %v", what, via)
		}
	}
}

// moved is the time from start until every stream that went through gone arrives through
// another gateway.
func (g *gatewayLab) moved(b *testing.B, start time.Time, via []int, gone int) time.Duration {
	b.Helper()
	var took time.Duration
	for i, s := range g.streams {
		if via[i] != gone {
			continue
		}
		port := s.LocalPort()
		got, ok := g.capture.Await(start, 10*time.Second, func(c lab.Captured) bool {
			gw, known := g.macs[c.MAC]
			return c.ForHost && c.Proto == "udp" && c.SrcPort == port && known && gw != gone
		})
		if !ok {
			b.Fatalf("stream %d stayed off the survivors 10 s after gw%d went", i, gone+1)
		}
		took = max(took, got.At.Sub(start))
	}
	return took
}

func uses(gw int) func([]int) bool {
	return func(via []int) bool { return slices.Contains(via, gw) }
}

// BenchmarkPrivilegedExternalRouteFailover: a pod's 8 UDP streams (a datagram every 2 ms each)
// spread over two gateways, the first BFD-gated (FRR bfdd); its link goes down; the time until
// every stream that went through it arrives through the survivor, over 20 trials, with BFD at
// 300 ms x 3 and at 100 ms x 3 (detection 900 and 300 ms). Run with -benchtime 1x.
func BenchmarkPrivilegedExternalRouteFailover(b *testing.B) {
	privileged.Require(b)
	for _, ms := range []int{300, 100} {
		b.Run(fmt.Sprintf("bfd-%dms-x3", ms), func(b *testing.B) {
			g := newGatewayLab(b, 2, "--external-gateway-bfd-interval", fmt.Sprintf("%dms", ms), "--external-gateway-bfd-multiplier", "3")
			f := frr.StartBFDD(b, g.gws[0].NS, fmt.Sprintf("bfd\n peer %s local-address %s interface eth0\n  receive-interval %d\n  transmit-interval %d\n  detect-multiplier 3\n !\n!\n",
				g.Nodes[0].IPv4, g.gws[0].Fabric, ms, ms))
			policy := "failover"
			g.policy(b, policy, "kubernetes.io/metadata.name: "+g.pod.Namespace, true, g.gws...)
			g.applied(b, policy)
			g.stream(b, 8)
			b.ResetTimer()
			for range b.N {
				var ds []time.Duration
				for trial := range 20 {
					via := g.settle(b, "both gateways carry streams", func(via []int) bool {
						return f.PeerStatus(g.Nodes[0].IPv4.String()) == "up" && uses(0)(via) && uses(1)(via)
					})
					start := time.Now()
					g.gws[0].NS.MustRun(b, "ip", "link", "set", "eth0", "down")
					took := g.moved(b, start, via, 0)
					// Up again, with the route the link's going down took. The streams stay on gw2
					// (a resilient group gives gw1 its buckets back once idle, after 120 s): the
					// policy is made again for the next trial, its group afresh.
					g.gws[0].NS.MustRun(b, "ip", "link", "set", "eth0", "up")
					g.gws[0].NS.MustRun(b, "ip", "route", "replace", "192.0.2.50/32", "via", g.dst.Fabric.String())
					b.Logf("trial %d: streams through gw1 %v moved to gw2 in %s", trial, via, took.Round(time.Millisecond))
					ds = append(ds, took)
					if err := g.Kube.Delete(context.Background(), "k8s.ovn.org/v1", "AdminPolicyBasedExternalRoute", "", policy); err != nil {
						b.Fatal(err)
					}
					policy = fmt.Sprintf("failover-%d", trial+1) // another name: another table and group
					g.policy(b, policy, "kubernetes.io/metadata.name: "+g.pod.Namespace, true, g.gws...)
					g.applied(b, policy)
				}
				spread(b, "failover", ds)
			}
		})
	}
}

// BenchmarkPrivilegedExternalRouteProgramming: a policy over 100 namespaces of 10 pods each (on
// other nodes, plus one local pod streaming) with 8 gateways. Created: the time until the local
// pod's stream reaches the destination through a gateway instead of straight from the node; a
// gateway removed from the policy: the time until the streams that went
// through it arrive through the others. From the API write, 20 trials each.
func BenchmarkPrivilegedExternalRouteProgramming(b *testing.B) {
	privileged.Require(b)
	ctx := context.Background()
	g := newGatewayLab(b, 8)
	g.stream(b, 1)
	label := "bench-" + g.ID
	client := g.CP.Client(b)
	nss := []string{g.pod.Namespace}
	for i := range 99 {
		ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-%d", label, i), Labels: map[string]string{"bench": label}}}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
		nss = append(nss, ns.Name)
	}
	if _, err := client.CoreV1().Namespaces().Patch(ctx, g.pod.Namespace, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"bench":"`+label+`"}}}`), metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	for i, ns := range nss {
		for j := range 10 {
			if ns == g.pod.Namespace && j == 0 {
				continue // the local pod
			}
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", j), Namespace: ns},
				Spec: corev1.PodSpec{NodeName: "elsewhere", Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
			p, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			ip := netip.AddrFrom4([4]byte{10, 245, byte(i), byte(j + 1)}).String()
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
			if _, err := client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	port := g.streams[0].LocalPort()
	// direct: the stream reaches the destination straight from the node (no policy).
	direct := func() bool {
		since := time.Now()
		time.Sleep(50 * time.Millisecond)
		return g.capture.Count(func(c lab.Captured) bool {
			_, gw := g.macs[c.MAC]
			return !c.At.Before(since) && c.ForHost && c.SrcPort == port && !gw
		}) > 0
	}
	b.ResetTimer()
	for range b.N {
		var created, removed []time.Duration
		for trial := range 20 {
			for deadline := time.Now().Add(10 * time.Second); !direct(); {
				if time.Now().After(deadline) {
					b.Fatalf("trial %d: the pod's stream does not leave straight without the policy", trial)
				}
			}
			start := time.Now()
			g.policy(b, "bench", "bench: "+label, false, g.gws...)
			got, ok := g.capture.Await(start, 10*time.Second, func(c lab.Captured) bool {
				_, gw := g.macs[c.MAC]
				return c.ForHost && c.SrcPort == port && gw
			})
			if !ok {
				b.Fatalf("trial %d: the pod's stream never left through a gateway", trial)
			}
			created = append(created, got.At.Sub(start))
			if err := g.Kube.Delete(ctx, "k8s.ovn.org/v1", "AdminPolicyBasedExternalRoute", "", "bench"); err != nil {
				b.Fatal(err)
			}
		}
		g.policy(b, "bench", "bench: "+label, false, g.gws...)
		g.applied(b, "bench")
		g.stream(b, 16)
		for trial := range 20 {
			// Every stream through a gateway. The streams that left a gateway stay where they
			// went when it comes back (a resilient group: its buckets return to it once idle).
			via := g.settle(b, "every gateway back in the policy", func([]int) bool { return true })
			gone := via[trial%len(via)]
			start := time.Now()
			g.policy(b, "bench", "bench: "+label, false, append(append([]*lab.External{}, g.gws[:gone]...), g.gws[gone+1:]...)...)
			removed = append(removed, g.moved(b, start, via, gone))
			g.policy(b, "bench", "bench: "+label, false, g.gws...)
		}
		spread(b, "created-routed", created)
		spread(b, "gateway-removed", removed)
	}
}
