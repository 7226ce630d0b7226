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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/egressd/egressd/api/generated/clientset/versioned"
	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// The router's addresses on the lab's fabric, and the external hosts behind its gateway.
var (
	routerV4, routerV6 = netip.MustParseAddr("172.18.0.200"), netip.MustParseAddr("fc00:f853:ccd:e793::200")
	dst1V4, dst1V6     = netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8::10")
	dst2V4, dst2V6     = netip.MustParseAddr("203.0.113.11"), netip.MustParseAddr("2001:db8::11")
	fallbackV4         = netip.MustParseAddr("203.0.113.99")
)

// routerLab is a lab with agents restricted to the DaemonSet's capabilities, the kubelet and
// kube-proxy stand-ins, external hosts behind a gateway host, a client pod and the user's
// Service selecting app: egress-router-cni.
type routerLab struct {
	*lab.Lab
	// kube and egress poll without the client-side throttling of the lab's client, which
	// would blur the measured times.
	kube       kubernetes.Interface
	egress     versioned.Interface
	ns         string
	client     *lab.Pod
	dst1, dst2 *lab.External
	fallback   *lab.External
	gw         *lab.External
	svc4, svc6 netip.Addr
}

func newRouterLab(t *testing.T) *routerLab {
	t.Helper()
	ctx := context.Background()
	l := lab.New(t, lab.Options{Nodes: 3, Agents: true, AgentWrap: daemonSetWrap(daemonSetCapabilities(t))})
	r := &routerLab{Lab: l, ns: l.CP.Namespace(t)}
	cfg := rest.CopyConfig(l.CP.Config)
	cfg.QPS, cfg.Burst = 100, 200
	var err error
	if r.egress, err = versioned.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if r.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := l.StartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.StartKubeProxy(ctx); err != nil {
		t.Fatal(err)
	}
	add := func(name string, o lab.ExternalOptions, addrs ...netip.Addr) *lab.External {
		var s []string
		for _, a := range addrs {
			s = append(s, a.String())
		}
		e, err := l.AddExternal(name, o, s...)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	r.dst1 = add("dst1", lab.ExternalOptions{}, dst1V4, dst1V6)
	r.dst2 = add("dst2", lab.ExternalOptions{}, dst2V4, dst2V6)
	r.fallback = add("fallback", lab.ExternalOptions{}, fallbackV4)
	r.gw = add("gw", lab.ExternalOptions{Forwarding: true})
	var routes []string
	for _, e := range []*lab.External{r.dst1, r.dst2, r.fallback} {
		for _, a := range e.Addrs {
			if a.Is4() {
				routes = append(routes, fmt.Sprintf("ip route add %s/32 via %s", a, e.Fabric))
			} else {
				routes = append(routes, fmt.Sprintf("ip -6 route add %s/128 via %s", a, e.Fabric6))
			}
		}
	}
	if err := r.gw.NS.Script(routes...); err != nil {
		t.Fatal(err)
	}
	r.client = addPod(t, l.Nodes[0], r.ns, "client", lab.PodOptions{}) // the leader's node, never cut off
	ports := []corev1.ServicePort{
		{Name: "tcp80", Protocol: corev1.ProtocolTCP, Port: 80},
		{Name: "udp80", Protocol: corev1.ProtocolUDP, Port: 80},
		{Name: "tcp8443", Protocol: corev1.ProtocolTCP, Port: 8443},
		{Name: "sctp5000", Protocol: corev1.ProtocolSCTP, Port: 5000},
		{Name: "tcp8080", Protocol: corev1.ProtocolTCP, Port: 8080},
	}
	for i := range ports {
		ports[i].TargetPort = intstr.FromInt32(ports[i].Port)
	}
	svc, err := l.Client.CoreV1().Services(r.ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "egress-router"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "egress-router-cni"}, Ports: ports,
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack), IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.svc4, r.svc6 = netip.MustParseAddr(svc.Spec.ClusterIPs[0]), netip.MustParseAddr(svc.Spec.ClusterIPs[1])
	return r
}

// routerYAML is the user's EgressRouter: TCP and UDP 80 and SCTP 5000 to dst1, TCP 8443 to
// dst2:443, both families; other IPv4 ports to the fallback host when fallback is set.
func (r *routerLab) routerYAML(name string, fallback bool) string {
	fb := ""
	if fallback {
		fb = "\n    fallbackIP: " + fallbackV4.String()
	}
	rules := ""
	for _, d := range []struct{ one, two netip.Addr }{{dst1V4, dst2V4}, {dst1V6, dst2V6}} {
		rules += fmt.Sprintf(`
    - {destinationIP: "%[1]s", port: 80, protocol: TCP}
    - {destinationIP: "%[1]s", port: 80, protocol: UDP}
    - {destinationIP: "%[1]s", port: 5000, protocol: SCTP}
    - {destinationIP: "%[2]s", port: 8443, protocol: TCP, targetPort: 443}`, d.one, d.two)
	}
	return fmt.Sprintf(`apiVersion: network.operator.openshift.io/v1
kind: EgressRouter
metadata:
  name: %s
spec:
  mode: Redirect
  networkInterface:
    macvlan: {mode: Bridge}
  addresses:
  - {ip: "%s/24", gateway: "%s"}
  - {ip: "%s/64", gateway: "%s"}
  redirect:
    redirectRules:%s%s
`, name, routerV4, r.gw.Fabric, routerV6, r.gw.Fabric6, rules, fb)
}

func (r *routerLab) get(t testing.TB, ns, name string) *netopv1.EgressRouter {
	t.Helper()
	er, err := r.egress.NetworkOperatorV1().EgressRouters(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return er
}

func condition(er *netopv1.EgressRouter, typ netopv1.EgressRouterStatusConditionType) netopv1.EgressRouterStatusCondition {
	for _, c := range er.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return netopv1.EgressRouterStatusCondition{}
}

// waitCondition waits until the EgressRouter's condition typ has status and reason, and its
// message contains msg; it returns the object.
func (r *routerLab) waitCondition(t testing.TB, ns, name string, typ netopv1.EgressRouterStatusConditionType, status netopv1.ConditionStatus, reason, msg string) *netopv1.EgressRouter {
	t.Helper()
	var er *netopv1.EgressRouter
	poll.Eventually(t, fmt.Sprintf("EgressRouter %s: %s=%s %s", name, typ, status, reason), 30*time.Second, func() error {
		er = r.get(t, ns, name)
		c := condition(er, typ)
		if c.Status != status || c.Reason != reason || !strings.Contains(c.Message, msg) {
			return fmt.Errorf("%s=%s %s: %q", typ, c.Status, c.Reason, c.Message)
		}
		return nil
	})
	return er
}

// routerPod is the one router pod of the namespace, waited for.
func (r *routerLab) routerPod(t testing.TB, notNamed string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	poll.Eventually(t, "one running router pod", 30*time.Second, func() error {
		pods, err := r.kube.CoreV1().Pods(r.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=egress-router-cni"})
		if err != nil {
			return err
		}
		var names []string
		for i, p := range pods.Items {
			names = append(names, p.Name+"@"+p.Spec.NodeName+":"+string(p.Status.Phase))
			if p.Name != notNamed && p.Status.Phase == corev1.PodRunning && len(pods.Items) == 1 {
				pod = &pods.Items[i]
			}
		}
		if pod == nil {
			return fmt.Errorf("router pods %v", names)
		}
		return nil
	})
	return pod
}

// redirected checks one redirect through the Service: the destination host answers on port
// and saw the router's address as the source.
func (r *routerLab) redirected(proto string, svc netip.Addr, port uint16, to *lab.External, toPort uint16, src netip.Addr, timeout time.Duration) error {
	switch proto {
	case "sctp":
		ob, ok, err := r.client.SCTPSeen(to, netip.AddrPortFrom(svc, port), toPort, timeout)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("SCTP %s: nothing arrived at %s port %d", lab.HostPort(svc, port), to.Name, toPort)
		}
		if ob.Src != src {
			return fmt.Errorf("SCTP %s: %s saw source %s, want %s", lab.HostPort(svc, port), to.Name, ob.Src, src)
		}
		return nil
	default:
		call := r.client.TCP
		if proto == "udp" {
			call = r.client.UDP
		}
		res := call(lab.HostPort(svc, port), lab.ClientOptions{Timeout: timeout})
		if res.Outcome != lab.OK {
			return fmt.Errorf("%s %s: %s", proto, lab.HostPort(svc, port), res)
		}
		if res.Seen.Host != to.Name || res.Seen.DstPort != toPort || res.Seen.Src != src {
			return fmt.Errorf("%s %s: %s saw %s -> port %d, want %s to see %s -> port %d", proto, lab.HostPort(svc, port),
				res.Seen.Host, res.Seen.Src, res.Seen.DstPort, to.Name, src, toPort)
		}
		return nil
	}
}

// checkRedirects checks every rule in both families, the fallback (or the rejection) of
// other IPv4 ports, and the rejection of other IPv6 ports (no IPv6 fallback).
func (r *routerLab) checkRedirects(t *testing.T, step string, fallback bool) {
	t.Helper()
	for _, f := range []struct {
		svc, src, dst1 netip.Addr
	}{{r.svc4, routerV4, dst1V4}, {r.svc6, routerV6, dst1V6}} {
		for _, c := range []struct {
			proto        string
			port, toPort uint16
			to           *lab.External
		}{{"tcp", 80, 80, r.dst1}, {"udp", 80, 80, r.dst1}, {"sctp", 5000, 5000, r.dst1}, {"tcp", 8443, 443, r.dst2}} {
			if err := r.redirected(c.proto, f.svc, c.port, c.to, c.toPort, f.src, time.Second); err != nil {
				t.Errorf("%s: %v", step, err)
			}
		}
	}
	if fallback {
		if err := r.redirected("tcp", r.svc4, 8080, r.fallback, 8080, routerV4, time.Second); err != nil {
			t.Errorf("%s: other IPv4 port to the fallback host: %v", step, err)
		}
	} else if res := r.client.TCP(lab.HostPort(r.svc4, 8080), lab.ClientOptions{Timeout: time.Second}); res.Outcome != lab.Refused {
		t.Errorf("%s: other IPv4 port without fallback: %s, want refused", step, res)
	}
	if res := r.client.TCP(lab.HostPort(r.svc6, 8080), lab.ClientOptions{Timeout: time.Second}); res.Outcome != lab.Refused {
		t.Errorf("%s: other IPv6 port (no IPv6 fallback): %s, want refused", step, res)
	}
}

// restored waits until TCP 80 through the Service reaches dst1 from the router's address again
// and returns how long after start it did (tries time out after 200 ms, the resolution).
func (r *routerLab) restored(t *testing.T, step string, start time.Time) time.Duration {
	t.Helper()
	poll.Eventually(t, step+": traffic through the router", 60*time.Second, func() error {
		return r.redirected("tcp", r.svc4, 80, r.dst1, 80, routerV4, 200*time.Millisecond)
	})
	return time.Since(start)
}

// TestPrivilegedEgressRouter: an EgressRouter in redirect mode, with agents restricted to the
// DaemonSet's capabilities (no SYS_ADMIN: egressd-cni configures the router pod). A client pod
// reaches, through the user's Service selecting app: egress-router-cni, each redirect rule's
// destination (TCP, UDP, SCTP; with and without targetPort; IPv4 and IPv6) from the router's
// address; other IPv4 ports reach the fallback host, other IPv6 ports (no IPv6 fallback) are
// rejected. The router's node turning NotReady, then another router node losing its fabric
// link, each recreates the router on another node (time measured, then five more trials); an
// agent restart on the router's node changes nothing; a spec change without the fallback
// replaces the pod (traffic gap measured) and rejects other IPv4 ports; a router pod that loses
// its macvlan is reported, and replaced once deleted; the conditions follow each step. Routers
// that no node can host, whose macvlan fails, with an invalid rule, or whose pod the
// namespace's quota refuses are Degraded with the reason. Deleting the EgressRouter removes the
// pod and everything in the nodes.
func TestPrivilegedEgressRouter(t *testing.T) {
	privileged.Require(t)
	ctx := context.Background()
	r := newRouterLab(t)
	n0, n1, n2 := r.Nodes[0], r.Nodes[1], r.Nodes[2]
	if h := leaseHolder(ctx, r.Client, r.LeaderNamespace()); h != n0.Name {
		poll.Eventually(t, "the leader on "+n0.Name, 20*time.Second, holds(ctx, r.Client, r.LeaderNamespace(), n0.Name))
	}

	// Degraded routers, each with a reason a user can act on.
	bad := r.CP.Namespace(t)
	apply(t, r.Lab, bad, `apiVersion: network.operator.openshift.io/v1
kind: EgressRouter
metadata: {name: elsewhere}
spec:
  mode: Redirect
  networkInterface: {macvlan: {mode: Bridge}}
  addresses: [{ip: 192.0.2.50/24, gateway: 192.0.2.1}]
  redirect: {fallbackIP: 203.0.113.99}
---
apiVersion: network.operator.openshift.io/v1
kind: EgressRouter
metadata: {name: nonic}
spec:
  mode: Redirect
  networkInterface: {macvlan: {mode: Bridge, master: nosuchnic}}
  addresses: [{ip: 172.18.0.201/24}]
  redirect: {fallbackIP: 172.18.0.1}
---
apiVersion: network.operator.openshift.io/v1
kind: EgressRouter
metadata: {name: invalid}
spec:
  mode: Redirect
  networkInterface: {macvlan: {mode: Bridge}}
  addresses: [{ip: 172.18.0.202/24}]
  redirect:
    redirectRules: [{destinationIP: "2001:db8::10", port: 80, protocol: TCP}]
`)
	// A namespace whose quota admits no pod (its status written here: the lab runs no quota
	// controller, and admission enforces only what the status lists).
	full := r.CP.Namespace(t)
	none := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}
	q, err := r.kube.CoreV1().ResourceQuotas(full).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: none}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.Status = corev1.ResourceQuotaStatus{Hard: none, Used: none}
	if _, err := r.kube.CoreV1().ResourceQuotas(full).UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	apply(t, r.Lab, full, `apiVersion: network.operator.openshift.io/v1
kind: EgressRouter
metadata: {name: quota}
spec:
  mode: Redirect
  networkInterface: {macvlan: {mode: Bridge}}
  addresses: [{ip: 172.18.0.203/24}]
  redirect: {fallbackIP: 172.18.0.1}
`)
	er := r.waitCondition(t, full, "quota", netopv1.EgressRouterDegraded, netopv1.ConditionTrue, "RouterPodRefused", "exceeded quota")
	// The leader retries (every 5 s) without claiming a pod it could not create: the status
	// stays Degraded since the refusal, and no RouterPodCreated event.
	since := condition(er, netopv1.EgressRouterDegraded).LastTransitionTime
	time.Sleep(6 * time.Second)
	if c := condition(r.get(t, full, "quota"), netopv1.EgressRouterDegraded); c.Reason != "RouterPodRefused" || !c.LastTransitionTime.Equal(&since) {
		t.Errorf("a refused router's Degraded condition went from True since %s to %s %s since %s", since, c.Status, c.Reason, c.LastTransitionTime)
	}
	evs, err := r.kube.CoreV1().Events(full).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=quota,reason=RouterPodCreated"})
	if err != nil || len(evs.Items) > 0 {
		t.Errorf("RouterPodCreated events for a pod the quota refused: %d (%v)", len(evs.Items), err)
	}
	if err := r.egress.NetworkOperatorV1().EgressRouters(full).Delete(ctx, "quota", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitCondition(t, bad, "elsewhere", netopv1.EgressRouterDegraded, netopv1.ConditionTrue, "NoNodeForNetwork", "192.0.2.0/24")
	r.waitCondition(t, bad, "nonic", netopv1.EgressRouterDegraded, netopv1.ConditionTrue, "ConfigurationFailed", "nosuchnic")
	er = r.waitCondition(t, bad, "invalid", netopv1.EgressRouterDegraded, netopv1.ConditionTrue, "InvalidSpec", "2001:db8::10")
	if c := condition(er, netopv1.EgressRouterAvailable); c.Status != netopv1.ConditionFalse {
		t.Errorf("an invalid EgressRouter is Available=%s", c.Status)
	}
	for _, name := range []string{"elsewhere", "nonic", "invalid"} {
		if err := r.egress.NetworkOperatorV1().EgressRouters(bad).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Eventually(t, "the degraded routers' pods gone", 30*time.Second, func() error {
		pods, err := r.kube.CoreV1().Pods(bad).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) > 0 {
			return fmt.Errorf("pods: %d (%v)", len(pods.Items), err)
		}
		return nil
	})

	// The router: placed on the least loaded eligible node (all are on the fabric: n0 by name).
	start := time.Now()
	apply(t, r.Lab, r.ns, r.routerYAML("egress-router", true))
	er = r.waitCondition(t, r.ns, "egress-router", netopv1.EgressRouterAvailable, netopv1.ConditionTrue, "RouterConfigured", "on node "+n0.Name)
	pod := r.routerPod(t, "")
	t.Logf("router pod %s on %s available after %s: %s", pod.Name, pod.Spec.NodeName, time.Since(start).Round(time.Millisecond),
		condition(er, netopv1.EgressRouterAvailable).Message)
	if pod.Spec.NodeName != n0.Name {
		t.Fatalf("router pod on %s, want %s", pod.Spec.NodeName, n0.Name)
	}
	t.Logf("traffic through the router after %s", r.restored(t, "created", start).Round(time.Millisecond))
	r.checkRedirects(t, "created", true)

	// 1. The router's node turns NotReady: recreated on n1 (least loaded, then by name).
	start = time.Now()
	if err := n0.SetReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	pod = r.routerPod(t, pod.Name)
	took := r.restored(t, "node NotReady", start)
	t.Logf("node NotReady: router recreated on %s and serving %s after the fault", pod.Spec.NodeName, took.Round(time.Millisecond))
	if pod.Spec.NodeName != n1.Name {
		t.Errorf("router pod on %s, want %s", pod.Spec.NodeName, n1.Name)
	}
	r.waitCondition(t, r.ns, "egress-router", netopv1.EgressRouterAvailable, netopv1.ConditionTrue, "RouterConfigured", "on node "+n1.Name)
	r.checkRedirects(t, "node NotReady", true)
	r.waitEvent(t, "NodeUnavailable", n0.Name)
	if err := n0.SetReady(ctx, true); err != nil {
		t.Fatal(err)
	}

	// 2. The router's node loses its fabric link (its agent stops answering the leader's probes):
	// recreated on n0 (n0 and n2 host none; by name).
	start = time.Now()
	if err := n1.SetFabricLink(false); err != nil {
		t.Fatal(err)
	}
	took = r.restored(t, "fabric link down", start)
	pod = r.routerPod(t, pod.Name)
	t.Logf("fabric link down: router recreated on %s and serving %s after the fault", pod.Spec.NodeName, took.Round(time.Millisecond))
	if pod.Spec.NodeName != n0.Name {
		t.Errorf("router pod on %s, want %s", pod.Spec.NodeName, n0.Name)
	}
	r.waitCondition(t, r.ns, "egress-router", netopv1.EgressRouterAvailable, netopv1.ConditionTrue, "RouterConfigured", "on node "+n0.Name)
	r.checkRedirects(t, "fabric link down", true)
	r.waitEvent(t, "NodeUnavailable", n1.Name)
	if err := n1.SetFabricLink(true); err != nil {
		t.Fatal(err)
	}

	// Trials of a router node's death: n0, the leader, is NotReady so that it hosts no router
	// (its own link must stay up to probe the others); the router's node loses its fabric link
	// and gets it back, several times.
	if err := n0.SetReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	pod = r.routerPod(t, pod.Name)
	r.restored(t, "leader's node NotReady", time.Now())
	var times []time.Duration
	for i := range 5 {
		node := r.node(pod.Spec.NodeName)
		start := time.Now()
		if err := node.SetFabricLink(false); err != nil {
			t.Fatal(err)
		}
		took := r.restored(t, fmt.Sprintf("trial %d", i), start) // the old router cannot serve: its link is down
		times = append(times, took)
		pod = r.routerPod(t, pod.Name)
		t.Logf("trial %d: %s lost its link, router recreated on %s and serving after %s", i, node.Name, pod.Spec.NodeName, took.Round(time.Millisecond))
		if err := node.SetFabricLink(true); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // the leader's probes see the node answer again
	}
	slices.Sort(times)
	t.Logf("router recreation after a node's link died, %d trials: min %s, median %s, max %s", len(times),
		times[0].Round(time.Millisecond), times[len(times)/2].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond))
	if err := n0.SetReady(ctx, true); err != nil {
		t.Fatal(err)
	}

	// The router's node's agent restarts: the router lives in the pod's namespace, so it keeps
	// serving, and the leader keeps the pod (a restarting agent's kernel answers the probes).
	node := r.node(pod.Spec.NodeName)
	node.Agent.Kill()
	if err := node.StartAgent(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.redirected("tcp", r.svc4, 80, r.dst1, 80, routerV4, time.Second); err != nil {
		t.Errorf("after %s's agent restarted: %v", node.Name, err)
	}
	if p := r.routerPod(t, ""); p.UID != pod.UID {
		t.Errorf("the router pod was replaced (%s on %s) when %s's agent restarted", p.Name, p.Spec.NodeName, node.Name)
	}

	// 3. The spec loses its fallback: the pod is replaced; other IPv4 ports are rejected.
	old := pod.Name
	stop := r.watchOutage()
	apply(t, r.Lab, r.ns, r.routerYAML("egress-router", false))
	pod = r.routerPod(t, old)
	r.waitCondition(t, r.ns, "egress-router", netopv1.EgressRouterAvailable, netopv1.ConditionTrue, "RouterConfigured", "other ports are rejected")
	r.restored(t, "spec changed", time.Now())
	t.Logf("spec changed: router pod replaced, traffic interrupted for %s", stop().Round(time.Millisecond))
	r.checkRedirects(t, "spec changed", false)
	r.waitEvent(t, "SpecChanged", "spec changed")

	// The router's macvlan disappears: the pod's readiness probe fails, the Service stops sending
	// to it, and the leader reports the router Degraded; deleting the pod, as the message
	// advises, brings a configured one.
	sandbox := r.sandboxOf(t)
	if _, err := sandbox.Run("ip", "link", "del", "net1"); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "the router pod unready", 20*time.Second, func() error {
		p, err := r.kube.CoreV1().Pods(r.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", p.Status.Conditions)
	})
	if res := r.client.TCP(lab.HostPort(r.svc4, 80), lab.ClientOptions{Timeout: time.Second}); res.Outcome == lab.OK {
		t.Errorf("the Service still sends to the unready router pod: %s", res)
	}
	r.waitCondition(t, r.ns, "egress-router", netopv1.EgressRouterDegraded, netopv1.ConditionTrue, "RouterPodNotReady", "is egressd-cni in node")
	if err := r.kube.CoreV1().Pods(r.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pod = r.routerPod(t, pod.Name)
	r.waitCondition(t, r.ns, "egress-router", netopv1.EgressRouterAvailable, netopv1.ConditionTrue, "RouterConfigured", pod.Name)
	r.restored(t, "pod replaced", time.Now())

	// 4. Deleting the EgressRouter removes the pod, its sandbox and its macvlan.
	if err := r.egress.NetworkOperatorV1().EgressRouters(r.ns).Delete(ctx, "egress-router", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "no router pod, no macvlan, no sandbox", 30*time.Second, func() error {
		pods, err := r.kube.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=egress-router-cni"})
		if err != nil || len(pods.Items) > 0 {
			return fmt.Errorf("router pods: %d (%v)", len(pods.Items), err)
		}
		for _, n := range []*lab.Node{n0, n1, n2} {
			if out, err := n.NS.Run("ip", "-o", "link", "show", "type", "macvlan"); err != nil || strings.TrimSpace(out) != "" {
				return fmt.Errorf("macvlans on %s: %q (%v)", n.Name, out, err)
			}
		}
		if out, err := r.Fabric.Run("ip", "netns", "list"); err != nil || strings.Contains(out, "el"+r.ID+"-k") {
			return fmt.Errorf("router sandboxes left: %q (%v)", out, err)
		}
		return nil
	})
	if res := r.client.TCP(lab.HostPort(r.svc4, 80), lab.ClientOptions{Timeout: time.Second}); res.Outcome == lab.OK {
		t.Errorf("the Service still reaches %s after the router's deletion", res.Seen.Host)
	}
}

// sandboxOf is the network namespace of the one router pod: the lab sandbox holding net1.
func (r *routerLab) sandboxOf(t *testing.T) *netns.NS {
	t.Helper()
	out, err := r.Fabric.Run("ip", "netns", "list")
	if err != nil {
		t.Fatal(err)
	}
	var found []*netns.NS
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "el"+r.ID+"-k") {
			continue
		}
		ns := &netns.NS{Name: f[0]}
		if _, err := ns.Run("ip", "link", "show", "net1"); err == nil {
			found = append(found, ns)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d lab sandboxes hold net1", len(found))
	}
	return found[0]
}

// watchOutage sends TCP 80 through the router every 50 ms (200 ms timeouts) until the returned
// function is called, which returns the longest run of failures, from its first failed try to
// the next success.
func (r *routerLab) watchOutage() func() time.Duration {
	done, result := make(chan struct{}), make(chan time.Duration)
	go func() {
		var longest time.Duration
		var failing time.Time
		for {
			select {
			case <-done:
				result <- longest
				return
			default:
			}
			start := time.Now()
			if err := r.redirected("tcp", r.svc4, 80, r.dst1, 80, routerV4, 200*time.Millisecond); err != nil {
				if failing.IsZero() {
					failing = start
				}
			} else if !failing.IsZero() {
				longest = max(longest, start.Sub(failing))
				failing = time.Time{}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return func() time.Duration {
		close(done)
		return <-result
	}
}

func (r *routerLab) node(name string) *lab.Node {
	for _, n := range r.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// waitEvent waits for an event of reason on the EgressRouter egress-router whose message
// contains msg.
func (r *routerLab) waitEvent(t *testing.T, reason, msg string) {
	t.Helper()
	poll.Eventually(t, "event "+reason, 10*time.Second, func() error {
		evs, err := r.kube.CoreV1().Events(r.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.kind=EgressRouter,reason=" + reason})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, msg) {
				return nil
			}
		}
		return fmt.Errorf("%d events of reason %s, none with %q", len(evs.Items), reason, msg)
	})
}
