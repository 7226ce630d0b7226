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

// demoEgressRouter shows the example EgressRouter degraded with its reason (192.0.2.0/24 is no
// lab node's network), then a router on the lab's fabric: the kubelet stand-in runs the pod the
// leader creates, the kube-proxy stand-in serves the user's Service, and the external server
// sees a client pod's connection to the Service's port 80 arrive on port 443 (the rule's
// targetPort) from the router's address.
func demoEgressRouter(ctx context.Context, l *lab.Lab, c *checker, web *lab.External) error {
	c.check("EgressRouter demo/egress-router-redirect (the example) Degraded", "True NoNodeForNetwork",
		routerCondition(ctx, l, "demo", "egress-router-redirect", "Degraded", "True"))

	const ns, router = "demo-router", "172.18.0.210"
	if err := l.StartKubelet(ctx); err != nil {
		return err
	}
	gw, err := l.AddExternal("gw", lab.ExternalOptions{Forwarding: true})
	if err != nil {
		return err
	}
	if err := gw.NS.Script(fmt.Sprintf("ip route add %s/32 via %s", web.Addrs[0], web.Fabric)); err != nil {
		return err
	}
	if _, err := l.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	client, err := l.Nodes[0].AddPod(ctx, ns, "client", lab.PodOptions{})
	if err != nil {
		return err
	}
	if err := l.Kube.Apply(ctx, ns, fmt.Sprintf(`apiVersion: network.operator.openshift.io/v1
kind: EgressRouter
metadata: {name: to-web}
spec:
  mode: Redirect
  networkInterface: {macvlan: {mode: Bridge}}
  addresses: [{ip: %s/24, gateway: "%s"}]
  redirect:
    redirectRules: [{destinationIP: "%s", port: 80, protocol: TCP, targetPort: 443}]
---
apiVersion: v1
kind: Service
metadata: {name: egress-router}
spec:
  selector: {app: egress-router-cni}
  ports: [{port: 80, protocol: TCP}]
`, router, gw.Fabric, web.Addrs[0])); err != nil {
		return err
	}
	c.check("EgressRouter demo-router/to-web Available", "True RouterConfigured", routerCondition(ctx, l, ns, "to-web", "Available", "True"))
	svc, err := l.Client.CoreV1().Services(ns).Get(ctx, "egress-router", metav1.GetOptions{})
	if err != nil {
		return err
	}
	dst := lab.HostPort(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
	var r lab.Result
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if r = client.TCP(dst, lab.ClientOptions{Timeout: time.Second}); r.Outcome == lab.OK || time.Now().After(deadline) {
			break
		}
	}
	c.check(fmt.Sprintf("client -> Service %s: what %s saw", dst, web.Name), fmt.Sprintf("ok %s -> port 443", router),
		fmt.Sprintf("%s %s -> port %d", r.Outcome, r.Seen.Src, r.Seen.DstPort))
	return nil
}

// routerCondition waits up to 20 s for the EgressRouter's condition typ to have status, and
// returns "<status> <reason>" as last seen.
func routerCondition(ctx context.Context, l *lab.Lab, ns, name, typ, status string) string {
	seen := "no condition " + typ
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		obj, err := l.Kube.Get(ctx, "network.operator.openshift.io/v1", "EgressRouter", ns, name)
		if err != nil {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, x := range conds {
			m, _ := x.(map[string]any)
			if m["type"] == typ {
				seen = fmt.Sprintf("%v %v", m["status"], m["reason"])
				if m["status"] == status {
					return seen
				}
			}
		}
	}
	return seen
}
