package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
)

// Helpers of the EgressIP scenarios: a lab whose node 0 is never an egress node (its pods are
// always steered) and whose other nodes are assignable, an external web host, a namespace
// labeled egress=yes.

const webPort = 80

var (
	web4 = netip.MustParseAddr("203.0.113.10")
	web6 = netip.MustParseAddr("2001:db8::10")
	// A second pair of egress IPs, for a second object.
	eip4b = netip.MustParseAddr("172.18.0.201")
	eip6b = netip.MustParseAddr("fc00:f853:ccd:e793::201")
)

type eipLab struct {
	*lab.Lab
	web *lab.External
	ns  string
}

// newEIPLab starts nodes nodes, all but node 0 labeled egress-assignable, with agents.
func newEIPLab(t testing.TB, nodes int, agentArgs ...string) *eipLab {
	t.Helper()
	return newEIPLabOn(t, nodes, nil, agentArgs...)
}

// newEIPLabOn is newEIPLab with the nodes' CNIs (lab.Options.CNI).
func newEIPLabOn(t testing.TB, nodes int, cni map[int]lab.CNI, agentArgs ...string) *eipLab {
	t.Helper()
	labels := map[int]map[string]string{}
	for i := 1; i < nodes; i++ {
		labels[i] = map[string]string{assignable: ""}
	}
	l := lab.New(t, lab.Options{Nodes: nodes, Agents: true, NodeLabels: labels, AgentArgs: agentArgs, CNI: cni})
	web, err := l.AddExternal("web", lab.ExternalOptions{}, web4.String(), web6.String())
	if err != nil {
		t.Fatal(err)
	}
	ns := egressNamespace(t, l)
	return &eipLab{Lab: l, web: web, ns: ns}
}

// egressIP creates an EgressIP named name+"-"+namespace selecting the pods labeled app=<app>
// of the lab's namespace, deleted when the test ends; it returns the object's name.
func (e *eipLab) egressIP(t testing.TB, name, app string, ips ...netip.Addr) string {
	t.Helper()
	name = name + "-" + e.ns
	var list []string
	for _, ip := range ips {
		list = append(list, fmt.Sprintf("%q", ip))
	}
	doc := fmt.Sprintf(`apiVersion: k8s.ovn.org/v1
kind: EgressIP
metadata:
  name: %s
spec:
  egressIPs: [%s]
  namespaceSelector:
    matchLabels: {egress: "yes"}
  podSelector:
    matchLabels: {app: %s}
`, name, strings.Join(list, ", "), app)
	if err := e.Kube.Apply(context.Background(), "", doc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Kube.Delete(context.Background(), "k8s.ovn.org/v1", "EgressIP", "", name) })
	return name
}

// items reads status.items as node name -> egress IP.
func (e *eipLab) items(t testing.TB, name string) map[string]netip.Addr {
	out := map[string]netip.Addr{}
	for _, s := range egressIPItemsTB(e.Lab, name) {
		node, ip, _ := cut(s)
		out[node] = netip.MustParseAddr(ip)
	}
	return out
}

// nodeOf is the node whose status item holds ip; "" if none.
func (e *eipLab) nodeOf(t testing.TB, name string, ip netip.Addr) string {
	for n, a := range e.items(t, name) {
		if a == ip {
			return n
		}
	}
	return ""
}

// node finds a lab node by name.
func (e *eipLab) node(name string) *lab.Node {
	for _, n := range e.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// waitPlaced waits until status.items are exactly want (node -> IP) and returns when it saw them.
func (e *eipLab) waitPlaced(t testing.TB, name string, timeout time.Duration, want map[*lab.Node]netip.Addr) time.Time {
	t.Helper()
	var w []string
	for n, ip := range want {
		w = append(w, n.Name+"="+ip.String())
	}
	slices.Sort(w)
	poll.Eventually(t, fmt.Sprintf("EgressIP %s status.items %v", name, w), timeout, func() error {
		if got := egressIPItemsTB(e.Lab, name); !slices.Equal(got, w) {
			return fmt.Errorf("%v", got)
		}
		return nil
	})
	return time.Now()
}

// stays checks that status.items stay want for d (no rebalancing).
func (e *eipLab) stays(t testing.TB, name string, d time.Duration, want map[*lab.Node]netip.Addr) {
	t.Helper()
	var w []string
	for n, ip := range want {
		w = append(w, n.Name+"="+ip.String())
	}
	slices.Sort(w)
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if got := egressIPItemsTB(e.Lab, name); !slices.Equal(got, w) {
			t.Fatalf("EgressIP %s status.items changed to %v, want them to stay %v", name, got, w)
		}
	}
}

// egressIPItemsTB is egressIPItems for benchmarks too.
func egressIPItemsTB(l *lab.Lab, name string) []string {
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

func cut(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == '=' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// webAddr is the web host's address of ip's family, with port.
func webAddr(ip netip.Addr) string {
	if ip.Is4() {
		return lab.HostPort(web4, webPort)
	}
	return lab.HostPort(web6, webPort)
}

func mustMAC(t testing.TB, n *lab.Node) string {
	t.Helper()
	m, err := n.MAC()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitNeighbour waits up to within for the web host's neighbour entry of ip to name mac, and
// returns how long that took from since.
func (e *eipLab) waitNeighbour(t testing.TB, ip netip.Addr, mac string, since time.Time, within time.Duration) time.Duration {
	t.Helper()
	var last lab.Neighbour
	for time.Since(since) < within {
		n, err := e.web.Neighbour(ip)
		if err != nil {
			t.Fatal(err)
		}
		if n.Lladdr == mac {
			return time.Since(since)
		}
		last = n
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the web host's neighbour entry for %s is %+v %s after the move, want %s (the new egress node): no announcement?", ip, last, within, mac)
	return 0
}

// inCluster says whether a is a pod address.
func inCluster(a netip.Addr) bool {
	for _, p := range lab.ClusterCIDRs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// leaderNode waits for a leading controller replica and returns the node it runs on.
func leaderNode(t testing.TB, l *lab.Lab) *lab.Node {
	t.Helper()
	var n *lab.Node
	poll.Eventually(t, "a leader", 20*time.Second, func() error {
		if n = l.LeaderNode(context.Background()); n == nil {
			return fmt.Errorf("holder %q", leaseHolder(context.Background(), l.Client, l.LeaderNamespace()))
		}
		return nil
	})
	return n
}

// blockHealth drops (block) or stops dropping the leader's health probes at node n.
func blockHealth(t testing.TB, n *lab.Node, block bool) {
	t.Helper()
	script := `table inet eipblock {
	chain input {
		type filter hook input priority -300; policy accept;
		tcp dport 9107 drop
	}
}`
	if !block {
		script = "delete table inet eipblock"
	}
	if err := n.Nft(script); err != nil {
		t.Fatal(err)
	}
}

// hasAddress says whether the node holds ip on an interface.
func hasAddress(t testing.TB, n *lab.Node, ip netip.Addr) bool {
	t.Helper()
	out, err := n.NS.Run("ip", "-br", "addr", "show", "to", ip.String())
	if err != nil {
		t.Fatal(err)
	}
	return len(out) > 0
}

// dumpNodes logs what a failed scenario needs to be understood: each node's conntrack entries
// of UDP flows, its egressd table's counters, rules and steering routes.
func dumpNodes(t testing.TB, nodes ...*lab.Node) {
	t.Helper()
	for _, n := range nodes {
		var b strings.Builder
		for _, cmd := range [][]string{
			{"conntrack", "-L", "-p", "udp"},
			{"nft", "list", "table", "inet", "egressd"},
			{"ip", "rule"},
			{"ip", "route", "show", "table", "all", "type", "unicast"},
			{"ip", "addr", "show", "dev", "eth0"},
		} {
			out, err := n.NS.Run(cmd[0], cmd[1:]...)
			fmt.Fprintf(&b, "$ %s (%v)\n%s\n", strings.Join(cmd, " "), err, out)
		}
		t.Logf("%s:\n%s", n.Name, b.String())
	}
}

// setAssignable labels (value non-nil) or unlabels a node egress-assignable.
func setAssignable(t testing.TB, l *lab.Lab, node string, value *string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{assignable: value}}})
	if _, err := l.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
