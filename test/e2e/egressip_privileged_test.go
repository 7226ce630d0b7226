package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

const (
	assignable = "k8s.ovn.org/egress-assignable"
	eip4       = "172.18.0.200"
	eip6       = "fc00:f853:ccd:e793::200"
)

// egressNamespace is a new namespace labelled egress=yes, which the tests' EgressIPs select.
func egressNamespace(t testing.TB, l *lab.Lab) string {
	t.Helper()
	ns := l.CP.Namespace(t)
	labelEgress(t, l.Client, ns)
	return ns
}

// labelEgress labels namespace ns egress=yes.
func labelEgress(t testing.TB, c kubernetes.Interface, ns string) {
	t.Helper()
	patch := []byte(`{"metadata":{"labels":{"egress":"yes"}}}`)
	if _, err := c.CoreV1().Namespaces().Patch(context.Background(), ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createEgressIP creates EgressIP name with ips for the pods labelled app=<app> in the
// namespaces egressNamespace makes, deleted when the test ends.
func createEgressIP(t testing.TB, l *lab.Lab, name, app string, ips ...string) {
	t.Helper()
	quoted := make([]string, len(ips))
	for i, ip := range ips {
		quoted[i] = strconv.Quote(ip)
	}
	apply(t, l, "", fmt.Sprintf(`apiVersion: k8s.ovn.org/v1
kind: EgressIP
metadata: {name: %s}
spec:
  egressIPs: [%s]
  namespaceSelector: {matchLabels: {egress: "yes"}}
  podSelector: {matchLabels: {app: %s}}
`, name, strings.Join(quoted, ", "), app))
	t.Cleanup(func() { _ = l.Kube.Delete(context.Background(), "k8s.ovn.org/v1", "EgressIP", "", name) })
}

// egressIPItems reads an EgressIP's status.items as "node=ip" strings, sorted.
func egressIPItems(t *testing.T, l *lab.Lab, name string) []string {
	t.Helper()
	obj, err := l.Kube.Get(context.Background(), "k8s.ovn.org/v1", "EgressIP", "", name)
	if err != nil {
		return nil
	}
	items, _, _ := unstructuredSlice(obj.Object, "status", "items")
	var out []string
	for _, it := range items {
		m, _ := it.(map[string]any)
		out = append(out, fmt.Sprintf("%v=%v", m["node"], m["egressIP"]))
	}
	slices.Sort(out)
	return out
}

func waitItems(t *testing.T, l *lab.Lab, name string, want ...string) {
	t.Helper()
	slices.Sort(want)
	poll.Eventually(t, "EgressIP "+name+" status.items", 20*time.Second, func() error {
		if got := egressIPItems(t, l, name); !slices.Equal(got, want) {
			return fmt.Errorf("%v, want %v", got, want)
		}
		return nil
	})
}

// eventuallySource waits until the external server sees src as the source of p's connections
// to dst, over TCP and UDP.
func eventuallySource(t *testing.T, step string, p *lab.Pod, dst string, src netip.Addr) {
	t.Helper()
	what := fmt.Sprintf("%s: %s/%s (%s CNI) -> %s leaves with %s", step, p.Namespace, p.Name, p.Node.CNI, dst, src)
	poll.Eventually(t, what, 10*time.Second, func() error {
		tcp := p.TCP(dst, lab.ClientOptions{Timeout: quick})
		udp := p.UDP(dst, lab.ClientOptions{Timeout: quick})
		if tcp.Outcome == lab.OK && tcp.Seen.Src == src && udp.Outcome == lab.OK && udp.Seen.Src == src {
			return nil
		}
		return fmt.Errorf("tcp %s, udp %s", tcp, udp)
	})
}

func labelNode(t *testing.T, l *lab.Lab, node string, value *string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{assignable: value}}})
	if _, err := l.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestPrivilegedEgressIP: the external host sees the egress IP from selected pods on the egress
// node and on other nodes (steered with the pod IP intact, SNATed on the egress node), IPv4 and
// IPv6, routed and bridged CNI shapes; unselected pods and pod-to-node traffic keep the node IP;
// pod-to-pod keeps the pod IP; the status as upstream writes it; a move when the egress node
// loses its label, with no packet leaving with a pod IP; an IP without any node left, counted
// by the leader's metric.
func TestPrivilegedEgressIP(t *testing.T) {
	privileged.Require(t)
	empty := ""
	l := lab.New(t, lab.Options{Nodes: 3, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true,
		NodeLabels: map[int]map[string]string{0: {assignable: empty}, 1: {assignable: empty}, 2: {assignable: empty}}})
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10"); err != nil {
		t.Fatal(err)
	}
	ns := egressNamespace(t, l)
	sel := map[string]string{"app": "eip"}
	sel0 := addPod(t, l.Nodes[0], ns, "sel0", lab.PodOptions{Labels: sel})
	sel1 := addPod(t, l.Nodes[1], ns, "sel1", lab.PodOptions{Labels: sel})
	plain0 := addPod(t, l.Nodes[0], ns, "plain0", lab.PodOptions{Labels: map[string]string{"app": "other"}})
	if err := sel1.Serve(8080); err != nil {
		t.Fatal(err)
	}
	if err := l.Nodes[2].Serve(8080); err != nil {
		t.Fatal(err)
	}

	apply(t, l, "", fmt.Sprintf(`apiVersion: k8s.ovn.org/v1
kind: EgressIP
metadata:
  name: eip-%s
spec:
  egressIPs: [%q, %q]
  namespaceSelector:
    matchLabels: {egress: "yes"}
  podSelector:
    matchLabels: {app: eip}
`, ns, eip4, eip6))
	name := "eip-" + ns
	t.Cleanup(func() { _ = l.Kube.Delete(context.Background(), "k8s.ovn.org/v1", "EgressIP", "", name) })
	// Least loaded first, ties by name; one IP of an object per node.
	n0, n1, n2 := l.Nodes[0], l.Nodes[1], l.Nodes[2]
	waitItems(t, l, name, n0.Name+"="+eip4, n1.Name+"="+eip6)

	v4, v6 := netip.MustParseAddr(eip4), netip.MustParseAddr(eip6)
	web4, web6 := "203.0.113.10:80", "[2001:db8::10]:80"
	eventuallySource(t, "egress node's own pod, IPv4", sel0, web4, v4)
	eventuallySource(t, "pod steered to another node, IPv6", sel0, web6, v6)
	eventuallySource(t, "pod steered from the bridged node, IPv4", sel1, web4, v4)
	eventuallySource(t, "bridged egress node's own pod, IPv6", sel1, web6, v6)
	eventuallySource(t, "unselected pod", plain0, web4, n0.IPv4)

	// Pod to pod keeps the pod IP; pod to a node address keeps the node IP (as upstream).
	if r := sel0.TCP(lab.HostPort(sel1.IPv4, 8080), lab.ClientOptions{Timeout: quick}); r.Outcome != lab.OK || r.Seen.Src != sel0.IPv4 {
		t.Errorf("pod to pod: %s, want source %s", r, sel0.IPv4)
	}
	if r := sel0.TCP(lab.HostPort(n2.IPv4, 8080), lab.ClientOptions{Timeout: quick}); r.Outcome != lab.OK || r.Seen.Src != n0.IPv4 {
		t.Errorf("pod to a node address: %s, want source %s (its node)", r, n0.IPv4)
	}

	// What egressctl shows on node-0: the IPv4 egress IP it hosts, both pods' IPv4 SNATed to it,
	// and the IPv6 of sel0 steered by mark to node-1.
	out := n0.NS.MustRun(t, egressctl(t), "egressip")
	for _, want := range []string{regexp.QuoteMeta(eip4 + " on eth0"), regexp.QuoteMeta(sel0.IPv4.String() + " -> " + eip4),
		regexp.QuoteMeta(sel1.IPv4.String() + " -> " + eip4),
		`\n6101\s+ipv6\s+0x10000/0xff0000\s+all\s+7101\s`, `\n7101\s+::/0\s+via ` + regexp.QuoteMeta(n1.IPv6.String())} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("egressctl egressip on %s lacks %q:\n%s", n0.Name, want, out)
		}
	}

	// The IPv4 egress node loses its label: the IP moves to the node without one, and the
	// pods' traffic follows.
	labelNode(t, l, n0.Name, nil)
	waitItems(t, l, name, n2.Name+"="+eip4, n1.Name+"="+eip6)
	eventuallySource(t, "after the move, from the old egress node", sel0, web4, v4)
	eventuallySource(t, "after the move, from the bridged node", sel1, web4, v4)

	// No node is left for the IPv4 egress IP (node-1 hosts the object's IPv6 one): the status
	// drops it, and the leader's metric, which the alert watches, says why.
	labelNode(t, l, n2.Name, nil)
	waitItems(t, l, name, n1.Name+"="+eip6)
	leader := leaderNode(t, l)
	series := fmt.Sprintf(`egressd_egressip_unassigned{egressip=%q,reason="NoMatchingNodeFound"}`, name)
	poll.Eventually(t, "the leader counts the unassigned egress IP", 10*time.Second, func() error {
		if v, err := leader.Controller.Sample(series); err != nil || v != "1" {
			return fmt.Errorf("%s on %s = %q (%v)", series, leader.Name, v, err)
		}
		return nil
	})
}
