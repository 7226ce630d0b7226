package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/test/frr"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// gatewaysSeen sends flows from p to dst and returns the MACs the destination saw them come
// from (which gateway forwarded each), and the sources it saw.
func gatewaysSeen(t *testing.T, p *lab.Pod, dst string, flows int) (macs, sources map[string]int) {
	t.Helper()
	macs, sources = map[string]int{}, map[string]int{}
	for range flows {
		if r := p.UDP(dst, lab.ClientOptions{Timeout: quick}); r.Outcome == lab.OK {
			macs[r.Seen.MAC]++
			sources[r.Seen.Src.String()]++
		}
	}
	return macs, sources
}

// TestPrivilegedExternalRoute: the pods of a targeted namespace reach a destination through
// two static gateways, spread per flow over both, with their pod IPs (no masquerade), on both
// CNI shapes, over UDP, TCP and ICMP; a gateway whose BFD session (FRR bfdd) goes down is left out at once and the
// flows continue on the survivor; the status as upstream writes it; other namespaces are
// untouched.
func TestPrivilegedExternalRoute(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	_, gws := gatewaysTo(t, l, false)
	var peers strings.Builder
	for _, n := range l.Nodes {
		fmt.Fprintf(&peers, " peer %s local-address %s interface eth0\n !\n", n.IPv4, gws[0].Fabric)
	}
	f := frr.StartBFDD(t, gws[0].NS, "bfd\n"+peers.String()+"!\n")
	mac := func(e *lab.External) string {
		out := e.NS.MustRun(t, "ip", "-o", "link", "show", "eth0")
		_, after, _ := strings.Cut(out, "link/ether ")
		return strings.Fields(after)[0]
	}
	mac1, mac2 := mac(gws[0]), mac(gws[1])

	ns, free := l.CP.Namespace(t), l.CP.Namespace(t)
	pods := []*lab.Pod{addPod(t, l.Nodes[0], ns, "routed", lab.PodOptions{}), addPod(t, l.Nodes[1], ns, "bridged", lab.PodOptions{})}
	other := addPod(t, l.Nodes[0], free, "other", lab.PodOptions{})
	name := gatewayPolicy(t, l, ns, fmt.Sprintf(`    static:
    - {ip: %q, bfdEnabled: true}
    - {ip: %q}
`, gws[0].Fabric, gws[1].Fabric))
	obj, err := l.Kube.Get(t.Context(), "k8s.ovn.org/v1", "AdminPolicyBasedExternalRoute", "", name)
	if err != nil {
		t.Fatal(err)
	}
	msgs, _, _ := unstructuredStrings(obj.Object, "status", "messages")
	want := fmt.Sprintf("%s: configured external gateway IPs: %s,%s", l.Nodes[0].Name, gws[0].Fabric, gws[1].Fabric)
	if !contains(msgs, want) {
		t.Errorf("status.messages %q lack %q", msgs, want)
	}

	poll.Eventually(t, "BFD to gw1 Up (FRR's view)", 15*time.Second, func() error {
		if s := f.PeerStatus(l.Nodes[0].IPv4.String()); s != "up" {
			return fmt.Errorf("FRR sees node-0 %q", s)
		}
		return nil
	})
	for _, p := range pods {
		poll.Eventually(t, p.Name+"'s flows spread over both gateways, with the pod IP", 15*time.Second, func() error {
			macs, sources := gatewaysSeen(t, p, "192.0.2.50:80", 24)
			if macs[mac1] == 0 || macs[mac2] == 0 || sources[p.IPv4.String()] != macs[mac1]+macs[mac2] {
				return fmt.Errorf("gateways %v (gw1 %s, gw2 %s), sources %v", macs, mac1, mac2, sources)
			}
			return nil
		})
	}
	// TCP and ICMP take the gateways too: each TCP connection through one of them with the pod
	// IP, and the pings are forwarded by the gateways (counted in their forward hook).
	echoes := countForwardedEchoes(t, gws)
	for _, p := range pods {
		for range 4 {
			r := p.TCP("192.0.2.50:80", lab.ClientOptions{Timeout: quick})
			if r.Outcome != lab.OK || (r.Seen.MAC != mac1 && r.Seen.MAC != mac2) || r.Seen.Src != p.IPv4 {
				t.Errorf("%s: a TCP connection to 192.0.2.50:80: %s, want it through gw1 (%s) or gw2 (%s) with the pod IP", p.Name, r, mac1, mac2)
			}
		}
		before := echoes(p.IPv4)
		if out, err := p.NS.Run("ping", "-c", "5", "-i", "0.2", "-W", "1", "192.0.2.50"); err != nil {
			t.Errorf("%s: ping 192.0.2.50: %v\n%s", p.Name, err, out)
		}
		if n := echoes(p.IPv4) - before; n < 5 {
			t.Errorf("%s: the gateways forwarded %d of its 5 echo requests to 192.0.2.50", p.Name, n)
		}
	}
	if _, sources := gatewaysSeen(t, other, "192.0.2.50:80", 4); sources[l.Nodes[0].IPv4.String()] != 4 {
		t.Errorf("a namespace the policy does not target: sources %v, want its node's address (masquerade)", sources)
	}

	// gw1 goes away (its link down): BFD takes it out, the flows continue on gw2 alone.
	gws[0].NS.MustRun(t, "ip", "link", "set", "eth0", "down")
	for _, p := range pods {
		poll.Eventually(t, p.Name+"'s flows all on gw2", 5*time.Second, func() error {
			macs, _ := gatewaysSeen(t, p, "192.0.2.50:80", 16)
			if macs[mac2] != 16 {
				return fmt.Errorf("of 16 flows: %v (gw2 %s)", macs, mac2)
			}
			return nil
		})
	}
}

// countForwardedEchoes counts, on each gateway, the ICMP echo requests it forwards, by source;
// it returns the sum over the gateways for a source.
func countForwardedEchoes(t *testing.T, gws []*lab.External) func(src netip.Addr) int {
	t.Helper()
	for _, gw := range gws {
		cmd := gw.NS.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(`table ip echoes {
	set sources { type ipv4_addr; flags dynamic; counter; }
	chain forward {
		type filter hook forward priority filter; policy accept;
		icmp type echo-request add @sources { ip saddr }
	}
}
`)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("echo counters on a gateway: %v: %s", err, out)
		}
	}
	element := regexp.MustCompile(`([0-9.]+) counter packets (\d+)`)
	return func(src netip.Addr) int {
		total := 0
		for _, gw := range gws {
			for _, m := range element.FindAllStringSubmatch(gw.NS.MustRun(t, "nft", "list", "set", "ip", "echoes", "sources"), -1) {
				if m[1] == src.String() {
					n, _ := strconv.Atoi(m[2])
					total += n
				}
			}
		}
		return total
	}
}

// gatewaysTo adds the destination host dst (192.0.2.50, and 2001:db8::50 with v6) and two
// forwarding hosts gw1 and gw2 routing to it: a policy's external gateways.
func gatewaysTo(t *testing.T, l *lab.Lab, v6 bool) (*lab.External, []*lab.External) {
	t.Helper()
	addrs := []string{"192.0.2.50"}
	if v6 {
		addrs = append(addrs, "2001:db8::50")
	}
	dst, err := l.AddExternal("dst", lab.ExternalOptions{}, addrs...)
	if err != nil {
		t.Fatal(err)
	}
	var gws []*lab.External
	for _, name := range []string{"gw1", "gw2"} {
		gw, err := l.AddExternal(name, lab.ExternalOptions{Forwarding: true})
		if err != nil {
			t.Fatal(err)
		}
		script := []string{"ip route add 192.0.2.50/32 via " + dst.Fabric.String()}
		if v6 {
			script = append(script, "ip -6 route add 2001:db8::50/128 via "+dst.Fabric6.String())
		}
		if err := gw.NS.Script(script...); err != nil {
			t.Fatal(err)
		}
		gws = append(gws, gw)
	}
	return dst, gws
}

// gatewayPolicy creates the AdminPolicyBasedExternalRoute gws-<ns> of namespace ns with the
// nextHops lines hops, waits for its Success, deletes it when the test ends, and returns its name.
func gatewayPolicy(t *testing.T, l *lab.Lab, ns, hops string) string {
	t.Helper()
	name := "gws-" + ns
	applyAndWait(t, l, "", fmt.Sprintf(`apiVersion: k8s.ovn.org/v1
kind: AdminPolicyBasedExternalRoute
metadata: {name: %s}
spec:
  from:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: %s}
  nextHops:
%s`, name, ns, hops), "Success")
	t.Cleanup(func() {
		_ = l.Kube.Delete(context.Background(), "k8s.ovn.org/v1", "AdminPolicyBasedExternalRoute", "", name)
	})
	return name
}
