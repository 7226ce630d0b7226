package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedSpoofedSource attacks the firewall with forged sources, as a pod with NET_RAW
// (PodSecurity baseline allows it) can send: a pod under Deny 0.0.0.0/0 and ::/0 sends as an
// unused address of its node's pod network, and as a pod of another namespace without a
// firewall (on the bridged CNI, its neighbour on the same bridge: told apart by the bridge port
// it comes in on). Nothing leaves, on both CNI shapes, IPv4 and IPv6, and
// egressd_spoofed_packets_total says why; on the bridge, the attacker's gratuitous ARP for its
// neighbour's address changes no one's neighbour entry; the pod whose address was borrowed, and
// link-local neighbour discovery, are untouched.
func TestPrivilegedSpoofedSource(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	web, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10")
	if err != nil {
		t.Fatal(err)
	}
	denied, open := l.CP.Namespace(t), l.CP.Namespace(t)
	applyFirewall(t, l, denied, denyAll)
	dsts := []netip.AddrPort{netip.MustParseAddrPort("203.0.113.10:5001"), netip.MustParseAddrPort("[2001:db8::10]:5001")}
	var bridgedAttacker, bridgedVictim *lab.Pod
	for _, n := range l.Nodes {
		attacker := addPod(t, n, denied, "attacker-"+n.Name, lab.PodOptions{})
		victim := addPod(t, n, open, "victim-"+n.Name, lab.PodOptions{})
		// The probe works: the victim's own packets leave, over both families.
		for _, dst := range dsts {
			if ok, err := victim.SCTP(web, dst, 2*time.Second); err != nil || !ok {
				t.Fatalf("%s (%s CNI) -> %s: arrived=%v (%v), want it to arrive", victim.Name, n.CNI, dst, ok, err)
			}
			if ok, err := attacker.SCTP(web, dst, quick); err != nil || ok {
				t.Fatalf("%s under Deny (%s CNI) -> %s with its own address: arrived=%v (%v), want dropped", attacker.Name, n.CNI, dst, ok, err)
			}
		}
		before := spoofCounts(t, n)
		forged := map[string][]netip.Addr{"unknown_source": {unusedAddr(n.PodV4), unusedAddr(n.PodV6)},
			"other_pod": {victim.IPv4, victim.IPv6}} // on the bridged node, its neighbour on the bridge
		for reason, srcs := range forged {
			for i, src := range srcs {
				if ok, err := attacker.SpoofedSCTP(web, src, dsts[i], quick); err != nil || ok {
					t.Errorf("%s under Deny (%s CNI) forging %s (%s) -> %s: arrived=%v (%v), want dropped", attacker.Name, n.CNI, src, reason, dsts[i], ok, err)
				}
			}
			if got := spoofCounts(t, n)[reason] - before[reason]; got < uint64(len(srcs)) {
				t.Errorf("node %s (%s CNI): egressd_spoofed_packets_total{reason=%q} rose by %d, want >= %d", n.Name, n.CNI, reason, got, len(srcs))
			}
		}
		if n.CNI.Bridges() {
			arpPoisoning(t, n, attacker, victim)
			bridgedAttacker, bridgedVictim = attacker, victim
		}
		// The victim is untouched, its neighbour discovery included (its IPv6 neighbour entry is
		// flushed first).
		if _, err := victim.NS.Run("ip", "-6", "neigh", "flush", "dev", "eth0"); err != nil {
			t.Fatal(err)
		}
		for _, dst := range dsts {
			if ok, err := victim.SCTP(web, dst, 2*time.Second); err != nil || !ok {
				t.Errorf("%s (%s CNI) -> %s after the attacks: arrived=%v (%v), want it to arrive", victim.Name, n.CNI, dst, ok, err)
			}
		}
	}
	// A restarted agent has not seen the pods' CNI ADDs: it keeps the ports it wrote.
	n := l.Nodes[1]
	n.Agent.Kill()
	if err := n.StartAgent(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, src := range []netip.Addr{bridgedVictim.IPv4, bridgedVictim.IPv6} {
		if ok, err := bridgedAttacker.SpoofedSCTP(web, src, dsts[i], quick); err != nil || ok {
			t.Errorf("after the agent's restart, %s forging its neighbour %s -> %s: arrived=%v (%v), want dropped", bridgedAttacker.Name, src, dsts[i], ok, err)
		}
		if ok, err := bridgedVictim.SCTP(web, dsts[i], 2*time.Second); err != nil || !ok {
			t.Errorf("after the agent's restart, %s -> %s: arrived=%v (%v), want it to arrive", bridgedVictim.Name, dsts[i], ok, err)
		}
	}
	// Pods whose ADD egressd-cni never saw (added before the plugin was chained): their bridge
	// ports come from the runtime's CNI result cache (--cni-cache-dir), so one of them cannot
	// send as the other either (with neither port known, the forged source would pass as the
	// victim's, unjudged: the victim's namespace has no firewall).
	attacker := addPod(t, n, denied, "unchained-attacker", lab.PodOptions{WithoutEgressdCNI: true})
	victim := addPod(t, n, open, "unchained-victim", lab.PodOptions{WithoutEgressdCNI: true})
	for i, src := range []netip.Addr{victim.IPv4, victim.IPv6} {
		poll.Eventually(t, fmt.Sprintf("%s (added without egressd-cni) -> %s leaves (the probe works)", victim.Name, dsts[i]), 20*time.Second, func() error {
			if ok, err := victim.SCTP(web, dsts[i], time.Second); err != nil || !ok {
				return fmt.Errorf("arrived=%v (%v)", ok, err)
			}
			return nil
		})
		poll.Eventually(t, fmt.Sprintf("%s (added without egressd-cni) forging its neighbour %s -> %s is dropped", attacker.Name, src, dsts[i]), 20*time.Second, func() error {
			if ok, err := attacker.SpoofedSCTP(web, src, dsts[i], quick); err != nil || ok {
				return fmt.Errorf("arrived=%v (%v)", ok, err)
			}
			return nil
		})
	}
}

// unusedAddr is an address of the pod network p that no lab pod gets (host-local hands them
// out from the bottom).
func unusedAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	b[len(b)-1] = 200
	a, _ := netip.AddrFromSlice(b)
	return a
}

// spoofCounts reads the node agent's egressd_spoofed_packets_total by reason.
func spoofCounts(t *testing.T, n *lab.Node) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, reason := range []string{"unknown_source", "other_pod"} {
		v, err := n.Agent.Sample(`egressd_spoofed_packets_total{reason="` + reason + `"}`)
		if err != nil {
			t.Fatal(err)
		}
		out[reason], _ = strconv.ParseUint(v, 10, 64)
	}
	return out
}

// arpPoisoning: the attacker claims the victim's addresses in gratuitous ARP replies and in
// unsolicited neighbour advertisements on their shared bridge. The node's neighbour entries for
// the victim keep the victim's MAC (the kernel takes an ARP reply once its entry is older than
// its locktime, 1 s: the attack is kept up for 3 s), and the port guard counts the messages.
func arpPoisoning(t *testing.T, n *lab.Node, attacker, victim *lab.Pod) {
	t.Helper()
	mac, err := victim.NS.Run("cat", "/sys/class/net/eth0/address")
	if err != nil {
		t.Fatal(err)
	}
	mac = strings.TrimSpace(mac)
	for _, ip := range []netip.Addr{victim.IPv4, victim.IPv6} {
		if _, err := n.NS.Run("ip", "neigh", "replace", ip.String(), "lladdr", mac, "dev", victim.PodFacing(), "nud", "stale"); err != nil {
			t.Fatal(err)
		}
	}
	before := spoofCounts(t, n)["other_pod"]
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err := attacker.ClaimARP(victim.IPv4, 1); err != nil {
			t.Fatal(err)
		}
		if err := attacker.ClaimNA(victim.IPv6, 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, ip := range []netip.Addr{victim.IPv4, victim.IPv6} {
		out, err := n.NS.Run("ip", "neigh", "show", ip.String(), "dev", victim.PodFacing())
		if err != nil || !strings.Contains(out, "lladdr "+mac) {
			t.Errorf("node %s: neighbour entry of %s after %s claimed it: %q (%v), want the victim's %s", n.Name, ip, attacker.Name, out, err, mac)
		}
	}
	if got := spoofCounts(t, n)["other_pod"] - before; got < 20 {
		t.Errorf("node %s: egressd_spoofed_packets_total{reason=\"other_pod\"} rose by %d for 30 forged ARP replies and NAs, want >= 20", n.Name, got)
	}
}
