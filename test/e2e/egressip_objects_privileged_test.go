package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressIPTwoObjectsOnePod: two EgressIPs select one pod; the first (oldest)
// serves it, the other stands by with upstream's UndefinedRequest event; when the serving one
// is deleted the standby takes over and the pod leaves with its IP.
func TestPrivilegedEgressIPTwoObjectsOnePod(t *testing.T) {
	privileged.Require(t)
	ctx := context.Background()
	e := newEIPLab(t, 3)
	n1, n2 := e.Nodes[1], e.Nodes[2]
	pod := addPod(t, e.Nodes[0], e.ns, "shared", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	v4 := netip.MustParseAddr(eip4)
	first := e.egressIP(t, "a-first", "eip", v4)
	e.waitPlaced(t, first, 20*time.Second, map[*lab.Node]netip.Addr{n1: v4})
	eventuallySource(t, "one object", pod, webAddr(v4), v4)
	second := e.egressIP(t, "b-second", "eip", eip4b)
	e.waitPlaced(t, second, 20*time.Second, map[*lab.Node]netip.Addr{n2: eip4b})

	want := fmt.Sprintf("EgressIP object %s will not be configured for pod %s_%s since another egressIP object %s is serving it, this is undefined",
		second, e.ns, pod.Name, first)
	poll.Eventually(t, "the standby's UndefinedRequest event", 10*time.Second, func() error {
		evs, err := e.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + second})
		if err != nil {
			return err
		}
		var got []string
		for _, ev := range evs.Items {
			if ev.Reason == "UndefinedRequest" && ev.Type == "Warning" && ev.Message == want && ev.InvolvedObject.Kind == "EgressIP" {
				return nil
			}
			got = append(got, ev.Type+" "+ev.Reason+": "+ev.Message)
		}
		return fmt.Errorf("events of %s: %v", second, got)
	})
	// The first claim holds: the pod still leaves with the first object's IP, again and again.
	for range 5 {
		eventuallySource(t, "two objects, the first serves", pod, webAddr(v4), v4)
	}

	if err := e.Kube.Delete(ctx, "k8s.ovn.org/v1", "EgressIP", "", first); err != nil {
		t.Fatal(err)
	}
	eventuallySource(t, "the serving object deleted: the standby takes over", pod, webAddr(eip4b), eip4b)
}

// TestPrivilegedEgressIPPodRecreated: a pod deleted and created again under the same name, on
// another node each time (the egress node of its IPv4 address included), always leaves with
// the egress IPs.
func TestPrivilegedEgressIPPodRecreated(t *testing.T) {
	privileged.Require(t)
	ctx := context.Background()
	e := newEIPLab(t, 3)
	n0, n1, n2 := e.Nodes[0], e.Nodes[1], e.Nodes[2]
	v4, v6 := netip.MustParseAddr(eip4), netip.MustParseAddr(eip6)
	name := e.egressIP(t, "recreated", "eip", v4, v6)
	e.waitPlaced(t, name, 20*time.Second, map[*lab.Node]netip.Addr{n1: v4, n2: v6})
	var p *lab.Pod
	for i, n := range []*lab.Node{n0, n2, n1, n0, n2} {
		if p != nil {
			if err := p.Delete(ctx); err != nil {
				t.Fatal(err)
			}
			poll.Eventually(t, "the old pod object gone", 10*time.Second, func() error {
				_, err := e.Client.CoreV1().Pods(e.ns).Get(ctx, "again", metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				return fmt.Errorf("still there (%v)", err)
			})
		}
		p = addPod(t, n, e.ns, "again", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
		step := fmt.Sprintf("incarnation %d on %s (%s)", i, n.Name, p.IPv4)
		eventuallySource(t, step+", IPv4", p, webAddr(v4), v4)
		eventuallySource(t, step+", IPv6", p, webAddr(v6), v6)
	}
}

// TestPrivilegedEgressIPWithFirewall: a pod that uses an egress IP (steered from its node, or on
// the egress node) is still judged by its namespace's EgressFirewall: a denied destination
// stays denied, an allowed one sees the egress IP.
func TestPrivilegedEgressIPWithFirewall(t *testing.T) {
	privileged.Require(t)
	e := newEIPLab(t, 2)
	n0, n1 := e.Nodes[0], e.Nodes[1]
	if _, err := e.AddExternal("other", lab.ExternalOptions{}, "198.51.100.10", "2001:db8:1::10"); err != nil {
		t.Fatal(err)
	}
	sel := lab.PodOptions{Labels: map[string]string{"app": "eip"}}
	steered := addPod(t, n0, e.ns, "steered", sel)
	local := addPod(t, n1, e.ns, "local", sel)
	applyFirewall(t, e.Lab, e.ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 203.0.113.10/32}}
  - {type: Allow, to: {cidrSelector: "2001:db8::10/128"}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
  - {type: Deny, to: {cidrSelector: "::/0"}}`)
	for _, r := range []reach{
		{steered, "198.51.100.10:80", false, lab.Timeout}, {steered, "[2001:db8:1::10]:80", false, lab.Timeout},
	} {
		poll.Eventually(t, "the firewall enforced", 10*time.Second, r.check)
	}
	v4 := netip.MustParseAddr(eip4)
	name := e.egressIP(t, "fw", "eip", v4)
	e.waitPlaced(t, name, 20*time.Second, map[*lab.Node]netip.Addr{n1: v4})
	for _, p := range []*lab.Pod{steered, local} {
		eventuallySource(t, "allowed, with the egress IP: "+p.Name, p, webAddr(v4), v4)
		checkReach(t, "denied although it uses an egress IP: "+p.Name, []reach{
			{p, "198.51.100.10:80", false, lab.Timeout}, {p, "198.51.100.10:80", true, lab.Timeout},
			{p, "[2001:db8:1::10]:80", false, lab.Timeout},
		})
	}
	if t.Failed() {
		t.Log(strings.Join(egressIPItemsTB(e.Lab, name), " "))
	}
}

// TestPrivilegedEgressIPSpreadsFlows: an EgressIP with two addresses on two egress nodes spreads
// a pod's flows over both, as upstream's reroute policy naming both nodes does (per flow: each
// TCP connection, from a new source port, keeps one address); none leaves with another source.
// With one address left in the spec, every flow leaves with it.
func TestPrivilegedEgressIPSpreadsFlows(t *testing.T) {
	privileged.Require(t)
	e := newEIPLab(t, 3)
	n1, n2 := e.Nodes[1], e.Nodes[2]
	pod := addPod(t, e.Nodes[0], e.ns, "spread", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	v4 := netip.MustParseAddr(eip4)
	name := e.egressIP(t, "spread", "eip", v4, eip4b)
	e.waitPlaced(t, name, 20*time.Second, map[*lab.Node]netip.Addr{n1: v4, n2: eip4b})
	eventuallySource(t, "two addresses", pod, webAddr(v4), v4)
	// sources opens flows TCP connections and counts their sources as the web host sees them.
	sources := func(flows int) map[netip.Addr]int {
		seen := map[netip.Addr]int{}
		for range flows {
			r := pod.TCP(webAddr(v4), lab.ClientOptions{Timeout: quick})
			if r.Outcome != lab.OK {
				t.Fatalf("a flow through the EgressIP: %s", r)
			}
			seen[r.Seen.Src]++
		}
		return seen
	}
	// 24 flows all on one address by chance: 2 in 2^24.
	seen := sources(24)
	t.Logf("24 flows: sources %v", seen)
	if len(seen) != 2 || seen[v4] == 0 || seen[eip4b] == 0 {
		t.Errorf("24 flows through an EgressIP with two addresses left with %v, want both %s and %s and nothing else", seen, v4, eip4b)
	}
	e.egressIP(t, "spread", "eip", v4)
	e.waitPlaced(t, name, 20*time.Second, map[*lab.Node]netip.Addr{n1: v4})
	eventuallySource(t, "one address left", pod, webAddr(v4), v4)
	if seen := sources(12); len(seen) != 1 || seen[v4] != 12 {
		t.Errorf("12 flows through an EgressIP with one address left with %v, want all with %s", seen, v4)
	}
}
