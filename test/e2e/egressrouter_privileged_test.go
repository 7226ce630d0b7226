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
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
	"github.com/egressd/egressd/test/lab"
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

// TestPrivilegedEgressRouter: an EgressRouter in redirect mode, with agents restricted to the
// DaemonSet's capabilities (no SYS_ADMIN: egressd-cni configures the router pod). A client pod
// reaches, through the user's Service selecting app: egress-router-cni, each redirect rule's
// destination (TCP, UDP, SCTP; with and without targetPort; IPv4 and IPv6) from the router's
// address; other IPv4 ports reach the fallback host, other IPv6 ports (no IPv6 fallback) are
// rejected. The router's node turning NotReady, then another router node losing its fabric
// link, each recreates the router on another node (time measured, then five more trials); an
// agent restart on the router's node changes nothing; a spec change without the fallback
// replaces the pod (traffic gap measured) and rejects other IPv4 ports; a router pod that loses
// its macvlan is reported after 30 s, and replaced on another node 30 s later; the conditions
// follow each step. Routers on a network no node reaches (no address in it, no default route),
// whose macvlan fails, with an invalid rule, or whose pod the namespace's quota refuses are
// Degraded with the reason. Deleting the
// EgressRouter removes the pod and everything in the nodes.
func TestPrivilegedEgressRouter(t *testing.T) {
	privileged.Require(t)
	ctx := context.Background()
	r := newRouterLab(t)
	n0, n1, n2 := r.Nodes[0], r.Nodes[1], r.Nodes[2]
	poll.Eventually(t, "the leader on "+n0.Name, 20*time.Second, holds(ctx, r.Client, r.LeaderNamespace(), "controller@"+n0.Name))

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
	// No node has an address in its network: placed anyway, its macvlan would go on the
	// default-route interface, which the lab's nodes lack.
	r.waitCondition(t, bad, "elsewhere", netopv1.EgressRouterDegraded, netopv1.ConditionTrue, "ConfigurationFailed",
		"no node interface has an address in 192.0.2.0/24 nor a default route: set networkInterface.macvlan.master")
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

	// A router on a network no node has an address on, whose macvlan master only n2 has: placed
	// on n0 first (by name), it fails there and on n1, and the leader moves it on until n2
	// configures it.
	if err := n2.NS.Script("ip link add ens9 type veth peer name ens9p", "ip link set ens9 up", "ip link set ens9p up"); err != nil {
		t.Fatal(err)
	}
	apply(t, r.Lab, bad, `apiVersion: network.operator.openshift.io/v1
kind: EgressRouter
metadata: {name: onenic}
spec:
  mode: Redirect
  networkInterface: {macvlan: {mode: Bridge, master: ens9}}
  addresses: [{ip: 198.51.100.50/24, gateway: 198.51.100.1}]
  redirect: {fallbackIP: 198.51.100.99}
`)
	start := time.Now()
	r.waitCondition(t, bad, "onenic", netopv1.EgressRouterAvailable, netopv1.ConditionTrue, "RouterConfigured", "on node "+n2.Name)
	t.Logf("the router whose master only %s has: configured there %s after its creation", n2.Name, time.Since(start).Round(time.Millisecond))
	evs, err = r.kube.CoreV1().Events(bad).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=onenic,reason=ConfigurationFailed"})
	if err != nil || !slices.ContainsFunc(evs.Items, func(e corev1.Event) bool { return strings.Contains(e.Message, "on node "+n0.Name) }) {
		t.Errorf("no ConfigurationFailed event from %s for the router whose master it lacks (%v)", n0.Name, err)
	}
	if err := r.egress.NetworkOperatorV1().EgressRouters(bad).Delete(ctx, "onenic", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The router: placed on the least loaded eligible node (all are on the fabric: n0 by name).
	start = time.Now()
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
		time.Sleep(3 * time.Second) // the leader's probes see the node answer again (4 probes, 500 ms apart)
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
	// to it, the leader reports the router Degraded once it has seen the pod unready for 30 s,
	// and replaces the pod on another node 30 s later.
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
	// Without net1 the pod has no default route, so a connection would fail either way: what
	// shows that the Service stops sending to it is its endpoints.
	poll.Eventually(t, "the unready router pod out of the Service's ready endpoints", 20*time.Second, func() error {
		eps, err := r.kube.DiscoveryV1().EndpointSlices(r.ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=egress-router"})
		if err != nil {
			return err
		}
		for _, s := range eps.Items {
			for _, e := range s.Endpoints {
				if e.TargetRef != nil && e.TargetRef.Name == pod.Name && (e.Conditions.Ready == nil || *e.Conditions.Ready) {
					return fmt.Errorf("EndpointSlice %s lists %s ready", s.Name, pod.Name)
				}
			}
		}
		return nil
	})
	// Reported once the leader has seen it unready for 30 s (it reconciles every 5 s).
	poll.Eventually(t, "the unready router pod reported", 45*time.Second, func() error {
		c := condition(r.get(t, r.ns, "egress-router"), netopv1.EgressRouterDegraded)
		if c.Status != netopv1.ConditionTrue || c.Reason != "RouterPodNotReady" || !strings.Contains(c.Message, "is egressd-cni in node") {
			return fmt.Errorf("Degraded=%s %s: %q", c.Status, c.Reason, c.Message)
		}
		return nil
	})
	start = time.Now()
	stuck := pod
	poll.Eventually(t, "the stuck router pod replaced", 60*time.Second, func() error {
		if _, err := r.kube.CoreV1().Pods(r.ns).Get(ctx, stuck.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s still there (%v)", stuck.Name, err)
		}
		return nil
	})
	if d := time.Since(start); d < 20*time.Second {
		t.Errorf("the stuck router pod was replaced %s after it was reported, want about 30 s", d.Round(time.Millisecond))
	}
	pod = r.routerPod(t, stuck.Name)
	if pod.Spec.NodeName == stuck.Spec.NodeName {
		t.Errorf("the stuck router pod was recreated on its own node %s, with others available", pod.Spec.NodeName)
	}
	r.waitEvent(t, "RouterPodNotReady", "not ready for 60s (its router is not there): router pod recreated on node "+pod.Spec.NodeName)
	r.waitCondition(t, r.ns, "egress-router", netopv1.EgressRouterAvailable, netopv1.ConditionTrue, "RouterConfigured", pod.Name)
	t.Logf("the stuck router pod replaced on %s, serving %s after it was reported", pod.Spec.NodeName, r.restored(t, "stuck pod replaced", start).Round(time.Millisecond))

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

// TestPrivilegedEgressRouterDefaultRouteLink: upstream's topology. An EgressRouter without
// macvlan.master whose network (192.0.2.0/24) no node has an address in, but which is on the
// L2 of the nodes' default-route link: its gateway holds 192.0.2.1 on the fabric, the nodes'
// default route goes through it. The leader places the router on a node anyway, says why in
// the Progressing condition and the event, the node puts the macvlan on its default-route
// interface, and a client pod reaches each rule's destination through the Service, from the
// router's address.
func TestPrivilegedEgressRouterDefaultRouteLink(t *testing.T) {
	privileged.Require(t)
	ctx := context.Background()
	r := newRouterLab(t)
	n0 := r.Nodes[0]
	poll.Eventually(t, "the leader on "+n0.Name, 20*time.Second, holds(ctx, r.Client, r.LeaderNamespace(), "controller@"+n0.Name))
	router, gateway := netip.MustParseAddr("192.0.2.50"), netip.MustParseAddr("192.0.2.1")
	for _, n := range r.Nodes {
		if err := n.NS.Script("ip route add default via " + r.gw.Fabric.String() + " dev eth0"); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.gw.NS.Script("ip addr add " + gateway.String() + "/24 dev eth0"); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*lab.External{r.dst1, r.dst2} {
		if err := e.NS.Script("ip route add 192.0.2.0/24 via " + r.gw.Fabric.String()); err != nil {
			t.Fatal(err)
		}
	}

	// The leader's decision is overwritten by the node's report within a second: watch for it.
	w, err := r.egress.NetworkOperatorV1().EgressRouters(r.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	progressing := make(chan []string, 1)
	go func() {
		var seen []string
		for ev := range w.ResultChan() {
			if er, ok := ev.Object.(*netopv1.EgressRouter); ok {
				if c := condition(er, netopv1.EgressRouterProgressing); c.Status == netopv1.ConditionTrue {
					seen = append(seen, c.Reason+": "+c.Message)
				}
			}
		}
		progressing <- seen
	}()
	apply(t, r.Lab, r.ns, fmt.Sprintf(`apiVersion: network.operator.openshift.io/v1
kind: EgressRouter
metadata: {name: upstream}
spec:
  mode: Redirect
  networkInterface: {macvlan: {mode: Bridge}}
  addresses: [{ip: %s/24, gateway: %s}]
  redirect:
    redirectRules:
    - {destinationIP: "%s", port: 80, protocol: TCP}
    - {destinationIP: "%s", port: 80, protocol: UDP}
    - {destinationIP: "%s", port: 8443, protocol: TCP, targetPort: 443}
`, router, gateway, dst1V4, dst1V4, dst2V4))
	er := r.waitCondition(t, r.ns, "upstream", netopv1.EgressRouterAvailable, netopv1.ConditionTrue, "RouterConfigured", "macvlan on eth0")
	t.Logf("Available: %s", condition(er, netopv1.EgressRouterAvailable).Message)
	pod := r.routerPod(t, "")
	if pod.Spec.NodeName != n0.Name { // every node eligible: by name
		t.Errorf("router pod on %s, want %s", pod.Spec.NodeName, n0.Name)
	}
	created := "router pod created on node " + n0.Name + "; no node has an address in 192.0.2.0/24: the macvlan sits on its default-route interface, as upstream"
	w.Stop()
	if seen := <-progressing; !slices.Contains(seen, "RouterPodCreated: "+created) {
		t.Errorf("Progressing conditions seen %q, want RouterPodCreated: %q", seen, created)
	}
	r.waitEvent(t, "RouterPodCreated", created)

	poll.Eventually(t, "traffic through the router", 30*time.Second, func() error {
		return r.redirected("tcp", r.svc4, 80, r.dst1, 80, router, 200*time.Millisecond)
	})
	for _, c := range []struct {
		proto        string
		port, toPort uint16
		to           *lab.External
	}{{"tcp", 80, 80, r.dst1}, {"udp", 80, 80, r.dst1}, {"tcp", 8443, 443, r.dst2}} {
		if err := r.redirected(c.proto, r.svc4, c.port, c.to, c.toPort, router, time.Second); err != nil {
			t.Error(err)
		}
	}
}
