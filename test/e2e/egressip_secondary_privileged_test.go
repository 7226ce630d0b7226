package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressIPSecondaryNetwork: an egress IP in a secondary host network of its node
// (bare metal: a second NIC on another network, upstream's "secondary host NIC" egress IP)
// leaves through that network's interface, by its routes, for the egress node's own pods and
// for pods of other nodes steered to it. The external host drops what arrives on the fabric
// from the secondary network (as a router's anti-spoofing would), so only traffic that left
// through the right interface gets an answer; before, the main table sent it out of the fabric
// with the secondary source. The table follows the interface's routes in main: a gateway that
// stops answering stops the traffic, its return brings it back. The egress node's reverse path
// filter is strict (RHEL's default): the replies arriving on the NIC, whose sources main routes
// through the fabric, pass only because the agent loosens the NIC's filter while it routes
// through it, and puts its value back after.
func TestPrivilegedEgressIPSecondaryNetwork(t *testing.T) {
	privileged.Require(t)
	empty := ""
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true,
		NodeLabels: map[int]map[string]string{0: {assignable: empty}}})
	web, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10")
	if err != nil {
		t.Fatal(err)
	}
	n0, n1 := l.Nodes[0], l.Nodes[1]
	// node-0's second NIC, eth1, on 10.10.10.0/24 and 2001:db8:abcd:1234::/64, whose gateway is
	// the web host (sec0, .254 / ::fe); main reaches the outside through it only as a fallback.
	netns.Veth(t, n0.NS, "eth1", web.NS, "sec0")
	n0.NS.Addr(t, "eth1", "10.10.10.1/24", "2001:db8:abcd:1234::1/64")
	web.NS.Addr(t, "sec0", "10.10.10.254/24", "2001:db8:abcd:1234::fe/64")
	if err := web.NS.Script("sysctl -qw net.ipv4.conf.sec0.rp_filter=0"); err != nil {
		t.Fatal(err)
	}
	// The node's default route is the fabric's (its primary interface, as on a real node),
	// through the web host, which does not forward: never used here.
	if err := n0.NS.Script("sysctl -qw net.ipv4.conf.all.rp_filter=1",
		"ip route add default via "+web.Fabric.String()+" dev eth0 metric 100",
		"ip route add default via 10.10.10.254 dev eth1 metric 4000",
		"ip -6 route add default via 2001:db8:abcd:1234::fe dev eth1 metric 4000"); err != nil {
		t.Fatal(err)
	}
	if err := web.Nft(`table inet antispoof {
	chain pre {
		type filter hook prerouting priority -300; policy accept;
		iifname "eth0" ip saddr 10.10.10.0/24 drop
		iifname "eth0" ip6 saddr 2001:db8:abcd:1234::/64 drop
	}
}`); err != nil {
		t.Fatal(err)
	}

	ns := egressNamespace(t, l)
	sel := map[string]string{"app": "eip"}
	sel0 := addPod(t, n0, ns, "sel0", lab.PodOptions{Labels: sel})
	sel1 := addPod(t, n1, ns, "sel1", lab.PodOptions{Labels: sel})
	const v4 = "10.10.10.100"
	name := "eip-" + ns
	createEgressIP(t, l, name, "eip", v4)
	waitItems(t, l, name, n0.Name+"="+v4)

	eip4 := netip.MustParseAddr(v4)
	eventuallySource(t, "the egress node's own pod", sel0, "203.0.113.10:80", eip4)
	eventuallySource(t, "a pod of another node, steered to the egress node", sel1, "203.0.113.10:80", eip4)
	rpFilter := func(nic string) string {
		return strings.TrimSpace(n0.NS.MustRun(t, "sysctl", "-n", "net.ipv4.conf."+nic+".rp_filter"))
	}
	if eth1, eth0 := rpFilter("eth1"), rpFilter("eth0"); eth1 != "2" || eth0 != "0" {
		t.Errorf("rp_filter while egressd routes through eth1: eth1 %s, eth0 (the default route's) %s; want 2 and 0 (as it was)", eth1, eth0)
	}

	// The gateway in main changes to one nobody answers for: the copy follows (a route event),
	// and the traffic stops; back to the real one, it flows again.
	if err := n0.NS.Script("ip route replace default via 10.10.10.253 dev eth1 metric 4000"); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "sel1's connections fail once main's gateway on eth1 is one nobody answers for", 10*time.Second, func() error {
		if r := sel1.TCP("203.0.113.10:80", lab.ClientOptions{Timeout: quick}); r.Outcome == lab.OK {
			return fmt.Errorf("still %s", r)
		}
		return nil
	})
	if err := n0.NS.Script("ip route replace default via 10.10.10.254 dev eth1 metric 4000"); err != nil {
		t.Fatal(err)
	}
	eventuallySource(t, "after the gateway came back", sel1, "203.0.113.10:80", eip4)

	// IPv6: another object (a node hosts one IP per object), on the same NIC.
	name6 := "eip6-" + ns
	sel6 := map[string]string{"app": "eip6"}
	six0 := addPod(t, n0, ns, "six0", lab.PodOptions{Labels: sel6})
	six1 := addPod(t, n1, ns, "six1", lab.PodOptions{Labels: sel6})
	createEgressIP(t, l, name6, "eip6", "2001:db8:abcd:1234::106")
	waitItems(t, l, name6, n0.Name+"=2001:db8:abcd:1234::106")
	eip6 := netip.MustParseAddr("2001:db8:abcd:1234::106")
	eventuallySource(t, "IPv6, the egress node's own pod", six0, "[2001:db8::10]:80", eip6)
	eventuallySource(t, "IPv6, a pod of another node", six1, "[2001:db8::10]:80", eip6)

	// Once no egress IP is there, eth1's filter is as it was (0: the larger, all's 1, applies).
	for _, n := range []string{name, name6} {
		if err := l.Kube.Delete(context.Background(), "k8s.ovn.org/v1", "EgressIP", "", n); err != nil {
			t.Fatal(err)
		}
	}
	poll.Eventually(t, "eth1's rp_filter put back to 0 after the egress IPs went", 10*time.Second, func() error {
		if got := rpFilter("eth1"); got != "0" {
			return fmt.Errorf("it is %s", got)
		}
		return nil
	})
}
