package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/egressd/egressd/test/lab"
)

// sourceSeen is the source the external server saw from p's connection to dst, once it is
// want or after 10 s.
func sourceSeen(p *lab.Pod, dst string, want netip.Addr) lab.Result {
	var r lab.Result
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if r = p.TCP(dst, lab.ClientOptions{Timeout: time.Second}); r.Seen.Src == want || time.Now().After(deadline) {
			return r
		}
	}
}

func createNamespace(ctx context.Context, l *lab.Lab, name string) error {
	_, err := l.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

// demoExternalRoute routes the pods of namespace demo-routes through a gateway host: the
// destination (the docs host) sees their pod IPs, not their nodes' (no masquerade), and the
// policy's status says which gateways each node configured.
func demoExternalRoute(ctx context.Context, l *lab.Lab, c *checker, docs *lab.External) error {
	const ns = "demo-routes"
	gw, err := l.AddExternal("gw1", lab.ExternalOptions{Forwarding: true})
	if err != nil {
		return err
	}
	if err := gw.NS.Script(fmt.Sprintf("ip route add %s/32 via %s", docs.Addrs[0], docs.Fabric)); err != nil {
		return err
	}
	if err := createNamespace(ctx, l, ns); err != nil {
		return err
	}
	var pods []*lab.Pod
	for i, n := range l.Nodes {
		p, err := n.AddPod(ctx, ns, fmt.Sprintf("routed-%d", i), lab.PodOptions{})
		if err != nil {
			return err
		}
		pods = append(pods, p)
	}
	if err := l.Kube.Apply(ctx, "", fmt.Sprintf(`apiVersion: k8s.ovn.org/v1
kind: AdminPolicyBasedExternalRoute
metadata: {name: demo-routes}
spec:
  from:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: %s}
  nextHops:
    static: [{ip: %q}]
`, ns, gw.Fabric)); err != nil {
		return err
	}
	status := "not Success"
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "AdminPolicyBasedExternalRoute", "", "demo-routes", "status.status", "Success", 20*time.Second); err == nil {
		status = "Success"
	}
	c.check("status.status", "Success", status)
	obj, err := l.Kube.Get(ctx, "k8s.ovn.org/v1", "AdminPolicyBasedExternalRoute", "", "demo-routes")
	if err != nil {
		return err
	}
	msgs, _, _ := unstructured.NestedStringSlice(obj.Object, "status", "messages")
	want := fmt.Sprintf("%s: configured external gateway IPs: %s", l.Nodes[0].Name, gw.Fabric)
	observed := fmt.Sprint(msgs)
	for _, m := range msgs {
		if m == want {
			observed = m
		}
	}
	c.check("status.messages", want, observed)
	for _, p := range pods {
		r := sourceSeen(p, lab.HostPort(docs.Addrs[0], 443), p.IPv4)
		c.check(fmt.Sprintf("%s (%s) -> %s:443 via %s, source", p.Name, p.Node.Name, docs.Addrs[0], gw.Fabric), "ok "+p.IPv4.String()+" (its pod IP)", fmt.Sprintf("%s %s (its pod IP)", r.Outcome, r.Seen.Src))
	}
	return nil
}

// demoEgressService gives the LoadBalancer Service demo-lb/lb an ingress IP (as MetalLB would)
// and an EgressService: the leader elects node-1 (the node labelled egress-host=yes), and the
// endpoints leave with the LB IP, the one on node-0 steered to node-1.
func demoEgressService(ctx context.Context, l *lab.Lab, c *checker, web *lab.External) error {
	const ns, lbIP = "demo-lb", "172.18.0.220"
	host := l.Nodes[1]
	if err := createNamespace(ctx, l, ns); err != nil {
		return err
	}
	if _, err := l.Client.CoreV1().Nodes().Patch(ctx, host.Name, "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"egress-host":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		return err
	}
	// The LB provider's part: the LB IP reaches the host node.
	if err := web.NS.Script(fmt.Sprintf("ip route add %s/32 via %s", lbIP, host.IPv4)); err != nil {
		return err
	}
	ep, err := l.Nodes[0].AddPod(ctx, ns, "endpoint", lab.PodOptions{Labels: map[string]string{"app": "lb"}})
	if err != nil {
		return err
	}
	if err := l.Kube.Apply(ctx, ns, `apiVersion: v1
kind: Service
metadata: {name: lb}
spec:
  type: LoadBalancer
  selector: {app: lb}
  ports: [{port: 80, protocol: TCP}]
---
apiVersion: k8s.ovn.org/v1
kind: EgressService
metadata: {name: lb}
spec:
  sourceIPBy: LoadBalancerIP
  nodeSelector:
    matchLabels: {egress-host: "yes"}
`); err != nil {
		return err
	}
	svc, err := l.Client.CoreV1().Services(ns).Get(ctx, "lb", metav1.GetOptions{})
	if err != nil {
		return err
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: lbIP}}
	if _, err := l.Client.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		return err
	}
	observed := "another host"
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressService", ns, "lb", "status.host", host.Name, 20*time.Second); err == nil {
		observed = host.Name
	}
	c.check("status.host", host.Name, observed)
	r := sourceSeen(ep, lab.HostPort(web.Addrs[0], 80), netip.MustParseAddr(lbIP))
	c.check(fmt.Sprintf("%s (%s) -> %s:80 source", ep.Name, ep.Node.Name, web.Addrs[0]), "ok "+lbIP, fmt.Sprintf("%s %s", r.Outcome, r.Seen.Src))
	return nil
}
