package e2e

import (
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

// firewalldRPFilter6 is firewalld's IPv6 reverse path filter as firewalld (1.0 and later, its
// default IPv6_rpfilter=strict, nftables backend) writes it: src/firewall/core/nftables.py,
// build_rpfilter_rules, in its chain filter_PREROUTING (IPTABLES_TO_NFT_HOOK: filter + 10).
const firewalldRPFilter6 = `table inet firewalld {
	chain filter_PREROUTING {
		type filter hook prerouting priority filter + 10; policy accept;
		icmpv6 type { nd-router-advert, nd-neighbor-solicit } accept
		meta nfproto ipv6 fib saddr . mark . iif oif missing drop
	}
}`

// TestPrivilegedEgressIPSecondaryNetworkFirewalld: an IPv6 egress IP on a secondary host
// network of a node that runs firewalld, whose IPv6_rpfilter checks every packet's source
// with its mark against the interface it arrived on (IPv6 has no rp_filter sysctl to loosen).
// The replies arrive through the secondary NIC while main routes their source (the external
// host, on the fabric) through eth0; the pods' own packets carry the steering mark, whose
// table routes everything through the secondary NIC. Both pass: the replies carry the egress
// IP table's mark through the check, and the steering tables send the cluster networks' lookups
// on to main. Before, the check dropped every packet of these pods on the egress node (and the
// other node's pod's on its own node).
func TestPrivilegedEgressIPSecondaryNetworkFirewalld(t *testing.T) {
	privileged.Require(t)
	empty := ""
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true,
		NodeLabels: map[int]map[string]string{0: {assignable: empty}}})
	web, err := l.AddExternal("web", lab.ExternalOptions{}, "2001:db8::10")
	if err != nil {
		t.Fatal(err)
	}
	n0, n1 := l.Nodes[0], l.Nodes[1]
	// node-0's second NIC, eth1, on 2001:db8:abcd:1234::/64, whose gateway is the web host
	// (sec0, ::fe); main reaches 2001:db8::10 through eth0 (the fabric).
	netns.Veth(t, n0.NS, "eth1", web.NS, "sec0")
	n0.NS.Addr(t, "eth1", "2001:db8:abcd:1234::1/64")
	web.NS.Addr(t, "sec0", "2001:db8:abcd:1234::fe/64")
	if err := n0.NS.Script("ip -6 route add default via 2001:db8:abcd:1234::fe dev eth1 metric 4000"); err != nil {
		t.Fatal(err)
	}
	// What leaves through the fabric with the secondary source is dropped at the web host, as a
	// router's anti-spoofing would: only traffic that left through eth1 gets an answer.
	if err := web.Nft(`table inet antispoof {
	chain pre {
		type filter hook prerouting priority -300; policy accept;
		iifname "eth0" ip6 saddr 2001:db8:abcd:1234::/64 drop
	}
}`); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*lab.Node{n0, n1} {
		if err := n.Nft(firewalldRPFilter6); err != nil {
			t.Fatal(err)
		}
	}

	ns := egressNamespace(t, l)
	sel := map[string]string{"app": "eip6"}
	six0 := addPod(t, n0, ns, "six0", lab.PodOptions{Labels: sel})
	six1 := addPod(t, n1, ns, "six1", lab.PodOptions{Labels: sel})
	// Pods not served by an egress IP are unaffected (main routes their sources and replies).
	other := addPod(t, n0, ns, "other", lab.PodOptions{})
	if r := other.TCP("[2001:db8::10]:80", lab.ClientOptions{Timeout: quick}); r.Outcome != lab.OK {
		t.Fatalf("a pod without egress IP under firewalld's filter: %s", r)
	}
	const v6 = "2001:db8:abcd:1234::106"
	name := "eip6-" + ns
	createEgressIP(t, l, name, "eip6", v6)
	waitItems(t, l, name, n0.Name+"="+v6)
	eip := netip.MustParseAddr(v6)
	eventuallySource(t, "IPv6 under firewalld's rpfilter, the egress node's own pod", six0, "[2001:db8::10]:80", eip)
	eventuallySource(t, "IPv6 under firewalld's rpfilter, a pod of another node", six1, "[2001:db8::10]:80", eip)

	// The filter still drops what it should: a packet from the web host's fabric address that
	// arrives through eth1 and belongs to no connection of the egress IP.
	if err := web.NS.Script("ip -6 route add 2001:db8:abcd:1234::1/128 dev sec0 src 2001:db8::10 table 77",
		"ip -6 rule add to 2001:db8:abcd:1234::1/128 lookup 77 pref 77"); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "an unrelated packet through eth1 from a source main routes through eth0 is still dropped", 10*time.Second, func() error {
		out, _ := web.NS.Run("ping", "-6", "-c1", "-W1", "-I", "2001:db8::10", "2001:db8:abcd:1234::1")
		if strings.Contains(out, " 0% packet loss") {
			return fmt.Errorf("it was answered: %s", out)
		}
		return nil
	})
}
