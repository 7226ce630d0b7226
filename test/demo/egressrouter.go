package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/egressd/egressd/test/lab"
)

// demoEgressRouter shows the example EgressRouter placed although no lab node has an address
// in 192.0.2.0/24, its macvlan to go on the node's default-route interface as upstream's would,
// then a router on the lab's fabric: the kubelet stand-in runs the pod the leader creates, the
// kube-proxy stand-in serves the user's Service, and the external server sees a client pod's
// connection to the Service's port 80 arrive on port 443 (the rule's targetPort) from the
// router's address.
func demoEgressRouter(ctx context.Context, l *lab.Lab, c *checker, web *lab.External) error {
	seen, msg := routerCondition(ctx, l, "demo", "egress-router-redirect", "Progressing", "True")
	c.check("EgressRouter demo/egress-router-redirect (the example) Progressing", "True RouterPodCreated", seen)
	_, why, _ := strings.Cut(msg, "; ")
	c.check("  why on a node off 192.0.2.0/24", "no node has an address in 192.0.2.0/24: the macvlan sits on its default-route interface, as upstream", why)
	// The lab's nodes have no default route: once the kubelet stand-in runs its pod, the example
	// could only fail from node to node.
	if err := l.Kube.Delete(ctx, "network.operator.openshift.io/v1", "EgressRouter", "demo", "egress-router-redirect"); err != nil {
		return err
	}

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
	seen, _ = routerCondition(ctx, l, ns, "to-web", "Available", "True")
	c.check("EgressRouter demo-router/to-web Available", "True RouterConfigured", seen)
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
// returns "<status> <reason>" and the message as last seen.
func routerCondition(ctx context.Context, l *lab.Lab, ns, name, typ, status string) (string, string) {
	seen, msg := "no condition "+typ, ""
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		obj, err := l.Kube.Get(ctx, "network.operator.openshift.io/v1", "EgressRouter", ns, name)
		if err != nil {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, x := range conds {
			m, _ := x.(map[string]any)
			if m["type"] == typ {
				seen, msg = fmt.Sprintf("%v %v", m["status"], m["reason"]), fmt.Sprint(m["message"])
				if m["status"] == status {
					return seen, msg
				}
			}
		}
	}
	return seen, msg
}
