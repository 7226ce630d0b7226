package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

const fragAllowedPort, fragDeniedPort = 5000, 5001

// TestPrivilegedEgressFirewallFragments: a UDP datagram larger than the MTU (4000 bytes over
// 1500) to a port a rule allows arrives whole at the external host, IPv4 (DF clear) and IPv6
// (the sender fragments), from routed and bridged pods; one to a port the firewall denies
// never arrives. The later fragments carry no ports: only the verdict of their datagram's
// first fragment lets them through, which the node's fragment counters show.
func TestPrivilegedEgressFirewallFragments(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	web, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10")
	if err != nil {
		t.Fatal(err)
	}
	allowed, err := web.ReceiveDatagrams(fragAllowedPort)
	if err != nil {
		t.Fatal(err)
	}
	denied, err := web.ReceiveDatagrams(fragDeniedPort)
	if err != nil {
		t.Fatal(err)
	}
	ns := l.CP.Namespace(t)
	pods := []*lab.Pod{addPod(t, l.Nodes[0], ns, "routed", lab.PodOptions{}), addPod(t, l.Nodes[1], ns, "bridged", lab.PodOptions{})}
	// Port rules on the destination: a later fragment without its first is dropped there, so
	// only following the first fragment's verdict can deliver the datagram.
	applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 203.0.113.0/24}, ports: [{protocol: UDP, port: 5000}]}
  - {type: Allow, to: {cidrSelector: "2001:db8::/32"}, ports: [{protocol: UDP, port: 5000}]}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
  - {type: Deny, to: {cidrSelector: "::/0"}}`)

	for _, p := range pods {
		datagramsFollowFirst(t, p, web, allowed, denied)
	}
	// A bridged node with br_netfilter on (the kernel's default) reassembles the datagram before
	// the bridge hands it up to the node, where the classifier sees it whole; without it (what
	// kube-proxy in iptables mode does not need on every CNI), the classifier meets fragments.
	if _, err := l.Nodes[1].NS.Run("sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=0", "net.bridge.bridge-nf-call-ip6tables=0"); err != nil {
		t.Fatal(err)
	}
	datagramsFollowFirst(t, pods[1], web, allowed, denied)
}

// datagramsFollowFirst sends 4000-byte datagrams from p to each of web's addresses, on the
// allowed port until one arrives whole, then three times on the denied port, and checks that
// none of the latter arrived; where p's node saw fragments, that their first ones were tracked
// and the later ones followed them, none dropped for lack of their first.
func datagramsFollowFirst(t *testing.T, p *lab.Pod, web *lab.External, allowed, denied *lab.Datagrams) {
	t.Helper()
	const size = 4000
	tracked, followed, dropped := fragments(t, p.Node, "tracked"), fragments(t, p.Node, "followed"), fragments(t, p.Node, "dropped")
	for _, dst := range web.Addrs {
		before := len(allowed.Sizes(dst))
		// A first datagram may meet a neighbour still being resolved; later ones do not.
		poll.Eventually(t, fmt.Sprintf("%s (%s CNI): a %d-byte datagram to %s allowed port arrives whole", p.Name, p.Node.CNI, size, dst),
			5*time.Second, func() error {
				if err := p.SendDatagram(lab.HostPort(dst, fragAllowedPort), size); err != nil {
					return err
				}
				time.Sleep(200 * time.Millisecond)
				if got := allowed.Sizes(dst)[before:]; !slices.Contains(got, size) {
					return fmt.Errorf("received %v", got)
				}
				return nil
			})
		for range 3 {
			if err := p.SendDatagram(lab.HostPort(dst, fragDeniedPort), size); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	for _, dst := range web.Addrs {
		if got := denied.Sizes(dst); len(got) > 0 {
			t.Errorf("%s (%s CNI): datagrams to the denied port %s arrived: sizes %v", p.Name, p.Node.CNI, lab.HostPort(dst, fragDeniedPort), got)
		}
	}
	n := p.Node
	dt, df, dd := fragments(t, n, "tracked")-tracked, fragments(t, n, "followed")-followed, fragments(t, n, "dropped")-dropped
	t.Logf("%s (%s CNI): fragments tracked +%v, followed +%v, dropped +%v", n.Name, n.CNI, dt, df, dd)
	if reassembled, _ := n.NS.Run("sysctl", "-n", "net.bridge.bridge-nf-call-iptables"); n.CNI.Bridges() && strings.TrimSpace(reassembled) == "1" {
		return
	}
	// 2 families x (1 allowed + 3 denied) datagrams, each of 3 fragments.
	if dt < 8 || df != 2*dt || dd != 0 {
		t.Errorf("%s (%s CNI): fragments tracked +%v, followed +%v, dropped +%v; want >= 8, twice as many, 0", n.Name, n.CNI, dt, df, dd)
	}
}

// fragments reads the node's egressd_egressfirewall_fragments_total{result}.
func fragments(t *testing.T, n *lab.Node, result string) float64 {
	t.Helper()
	return sample(t, n, `egressd_egressfirewall_fragments_total{result="`+result+`"}`)
}
