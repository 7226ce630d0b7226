package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/netns"
)

// demoSecondaryEgressIP gives node-1 (the egress node) a second NIC, eth1 on 10.10.10.0/24,
// wired to the docs host, which drops what arrives from that network over the fabric (as a
// router's anti-spoofing would). An egress IP of that network, 10.10.10.100, serves the voice
// pod of node-0 (its namespace's EgressFirewall allows the docs host): steered to node-1,
// SNATed there, and sent out of eth1 by a table copying eth1's routes (main's route to the host
// takes the fabric, where the host would drop it). eth1's reverse path filter is strict, as
// RHEL's net.ipv4.conf.default.rp_filter=1 makes a new NIC's: the agent loosens it while it
// routes through it, and puts it back after. The demo sets eth1's own value rather than all's:
// cilium-agent holds net.ipv4.conf.all.rp_filter at 0 (it sets it again whenever it
// reinitializes its datapath, as when node-1's addresses change).
func demoSecondaryEgressIP(ctx context.Context, l *lab.Lab, c *checker, host *lab.External, voice *lab.Pod) error {
	n1 := l.Nodes[1]
	if err := netns.Link(n1.NS, "eth1", host.NS, "sec0"); err != nil {
		return err
	}
	if err := n1.NS.AddAddrs("eth1", "10.10.10.1/24"); err != nil {
		return err
	}
	if err := host.NS.AddAddrs("sec0", "10.10.10.254/24"); err != nil {
		return err
	}
	if err := host.NS.Script("sysctl -qw net.ipv4.conf.sec0.rp_filter=0"); err != nil {
		return err
	}
	if err := n1.NS.Script("sysctl -qw net.ipv4.conf.eth1.rp_filter=1"); err != nil {
		return err
	}
	rpFilter := func() string {
		out, err := n1.NS.Run("sysctl", "-n", "net.ipv4.conf.eth1.rp_filter")
		if err != nil {
			return err.Error()
		}
		return strings.TrimSpace(out)
	}
	if err := host.Nft(`table inet antispoof {
	chain pre {
		type filter hook prerouting priority -300; policy accept;
		iifname "eth0" ip saddr 10.10.10.0/24 drop
	}
}`); err != nil {
		return err
	}
	const eip = "10.10.10.100"
	if err := demoNamespaceEgressIP(ctx, l, "demo-voice", "voice", eip); err != nil {
		return err
	}
	c.check("status.items", n1.Name+"="+eip, awaitItems(ctx, l, "demo-voice"))
	var r lab.Result
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if r = voice.TCP("192.0.2.10:443", lab.ClientOptions{Timeout: time.Second}); r.Seen.Src.String() == eip || time.Now().After(deadline) {
			break
		}
	}
	c.check(fmt.Sprintf("%s (%s) -> 192.0.2.10:443 source, through %s's eth1", voice.Name, voice.Node.Name, n1.Name), "ok "+eip,
		fmt.Sprintf("%s %s", r.Outcome, r.Seen.Src))
	// The reply path through eth1 may show in the sync after the one that routed the traffic
	// (egressd's own address and routes there are kernel events that bring it).
	loosened := rpFilter()
	for deadline := time.Now().Add(10 * time.Second); loosened != "2" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		loosened = rpFilter()
	}
	c.check(n1.Name+"'s eth1 strict (1): its rp_filter, loosened", "2", loosened)
	// The cloud step below turns the cluster into a cloud, where no secondary network hosts an
	// egress IP.
	if err := l.Kube.Delete(ctx, "k8s.ovn.org/v1", "EgressIP", "", "demo-voice"); err != nil {
		return err
	}
	got := rpFilter()
	for deadline := time.Now().Add(10 * time.Second); got != "1" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got = rpFilter()
	}
	c.check("eth1's rp_filter once no egress IP is there, put back", "1", got)
	return n1.NS.Script("sysctl -qw net.ipv4.conf.eth1.rp_filter=0")
}
