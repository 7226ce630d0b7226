package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/egressd/egressd/api/generated/clientset/versioned"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// BenchmarkPrivilegedEgressServiceFailover: an endpoint on node 0 (the leader's node, never a
// host) streams UDP (one datagram every 2 ms) to the web host, which sees the LB IP from the
// host (node 1 or 2, the nodeSelector's); the host's fabric link goes down: the time until the
// web host sees the LB IP again, from the new host, over 20 trials. Run with -benchtime 1x.
func BenchmarkPrivilegedEgressServiceFailover(b *testing.B) {
	privileged.Require(b)
	e := newEIPLab(b, 3) // nodes 1 and 2 labelled egress-assignable: the hosts the selector picks
	pod := addPod(b, e.Nodes[0], e.ns, "streamer", lab.PodOptions{Labels: map[string]string{"app": "lb"}})
	loadBalancer(b, e.Lab, e.ns, "lb", "", lbIP4)
	apply(b, e.Lab, e.ns, `apiVersion: k8s.ovn.org/v1
kind: EgressService
metadata:
  name: lb
spec:
  sourceIPBy: LoadBalancerIP
  nodeSelector:
    matchLabels: {k8s.ovn.org/egress-assignable: ""}
`)
	waitHost(b, e.Lab, e.ns, "lb", e.Nodes[1].Name)
	failovers(b, e, pod, netip.MustParseAddr(lbIP4), 20, func() *lab.Node {
		es, err := e.Kube.Get(context.Background(), "k8s.ovn.org/v1", "EgressService", e.ns, "lb")
		if err != nil {
			b.Fatal(err)
		}
		host, _, _ := unstructured.NestedString(es.Object, "status", "host")
		return e.node(host)
	})
}

// BenchmarkPrivilegedEgressServiceScale: 500 LoadBalancer Services of 10 endpoints each
// (EndpointSlices written by hand, spread over the 3 nodes), then their 500 EgressServices
// at once: the time from the first create to every status.host elected, and to every host
// node's SNAT map holding all the endpoints it serves; 3 rounds (the EgressServices deleted
// and the maps emptied between them). Run with -benchtime 1x.
func BenchmarkPrivilegedEgressServiceScale(b *testing.B) {
	privileged.Require(b)
	const services, endpoints = 500, 10
	// The endpoints' addresses are the whole pod network's, not only the nodes' pod CIDRs.
	l := lab.New(b, lab.Options{Nodes: 3, Agents: true, AgentArgs: []string{"--cluster-cidr=10.244.0.0/16,fd00:10:244::/48"}})
	ctx := context.Background()
	ns := l.CP.Namespace(b)
	cfg := rest.CopyConfig(l.CP.Config)
	cfg.QPS, cfg.Burst = 1000, 1000 // client-go's default of 5/s would be what the bench measures
	kc := kubernetes.NewForConfigOrDie(cfg)
	start := time.Now()
	for s := range services {
		name := fmt.Sprintf("s%03d", s)
		svc, err := kc.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}},
			metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("172.18.%d.%d", 10+s/250, s%250+1)}}
		if _, err := kc.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		var eps []discoveryv1.Endpoint
		for k := range endpoints {
			eps = append(eps, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.%d", 100+s/25, s%25*endpoints+k+1)},
				NodeName: ptr.To(l.Nodes[(s*endpoints+k)%len(l.Nodes)].Name), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		if _, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "egressd-e2e"}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps,
		}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%d LoadBalancer Services with %d endpoints each created in %s", services, endpoints, time.Since(start).Round(time.Millisecond))
	egress := versioned.NewForConfigOrDie(cfg)
	b.ResetTimer()
	for range b.N {
		var elected, programmed []time.Duration
		for round := range 3 {
			start := time.Now()
			for s := range services {
				es := &ovnv1.EgressService{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%03d", s)},
					Spec: ovnv1.EgressServiceSpec{SourceIPBy: ovnv1.SourceIPLoadBalancer}}
				if _, err := egress.K8sOVNV1().EgressServices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			created := time.Since(start)
			var hosts map[string]int
			for hosts == nil || len(hosts) == 0 {
				if time.Since(start) > 5*time.Minute {
					b.Fatal("not every EgressService has a host after 5 minutes")
				}
				hosts = electedHosts(b, egress, ns, services)
				if hosts == nil {
					time.Sleep(200 * time.Millisecond) // listing 500 objects: not too often
				}
			}
			elected = append(elected, time.Since(start))
			waitSNAT(b, l, start, func(node string) int { return hosts[node] * endpoints })
			programmed = append(programmed, time.Since(start))
			b.Logf("round %d: %d EgressServices created in %s, all hosts elected after %s (%s after the last create; %v), every SNAT programmed after %s",
				round, services, created.Round(time.Millisecond), elected[round].Round(time.Millisecond), (elected[round] - created).Round(time.Millisecond),
				hosts, programmed[round].Round(time.Millisecond))
			if err := egress.K8sOVNV1().EgressServices(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
				b.Fatal(err)
			}
			waitSNAT(b, l, time.Now(), func(string) int { return 0 })
		}
		spread(b, "elected", elected)
		spread(b, "programmed", programmed)
	}
}

// electedHosts counts the EgressServices of ns per status.host once all want of them have one;
// nil before.
func electedHosts(b *testing.B, egress versioned.Interface, ns string, want int) map[string]int {
	list, err := egress.K8sOVNV1().EgressServices(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	hosts := map[string]int{}
	for _, es := range list.Items {
		if es.Status.Host == "" {
			return nil
		}
		hosts[es.Status.Host]++
	}
	if len(list.Items) != want {
		return nil
	}
	return hosts
}

// waitSNAT waits until every node's IPv4 SNAT map holds want(node) elements.
func waitSNAT(b *testing.B, l *lab.Lab, since time.Time, want func(node string) int) {
	for {
		done := true
		var got []string
		for _, n := range l.Nodes {
			out, err := n.NS.Run("nft", "list", "map", "inet", "egressd", "egressip_snat4")
			if err != nil {
				b.Fatalf("%s: %v: %s", n.Name, err, out)
			}
			c := strings.Count(out, " : ") - 1 // the map's type line has one too
			got = append(got, fmt.Sprintf("%s=%d/%d", n.Name, c, want(n.Name)))
			done = done && c == want(n.Name)
		}
		if done {
			return
		}
		if time.Since(since) > 5*time.Minute {
			b.Fatalf("SNAT maps after 5 minutes: %v", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
