package e2e

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedAPIServerOutageKeepsEnforcing: the node loses the API server (its packets
// dropped at the node, both ways) for longer than the leader Lease, while a pod streams to an
// allowed and to a denied destination. Enforcement does not change, the agent notices and keeps
// running, and once the API server is reachable again a change reaches the node.
func TestPrivilegedAPIServerOutageKeepsEnforcing(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 1, Agents: true})
	addExternals(t, l, []string{"web", "203.0.113.10"}, []string{"other", "198.51.100.10"})
	ns := l.CP.Namespace(t)
	p := addPod(t, l.Nodes[0], ns, "p", lab.PodOptions{})
	applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 203.0.113.10/32}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}`)
	eventuallyReach(t, reach{p, "198.51.100.10:80", false, lab.Timeout}, 10*time.Second)

	node, agent := l.Nodes[0], l.Nodes[0].Agent
	const n, every = 360, 50 * time.Millisecond // 18 s of traffic
	var wg sync.WaitGroup
	var allowedSent, allowedGot, deniedSent, deniedGot int
	wg.Go(func() { allowedSent, allowedGot, _ = p.UDPStream("203.0.113.10:80", n, every) })
	wg.Go(func() { deniedSent, deniedGot, _ = p.UDPStream("198.51.100.10:80", n, every) })
	time.Sleep(time.Second)
	blackhole := strings.NewReader(`table inet outage {
	chain out {
		type filter hook output priority 0; policy accept;
		tcp dport 6443 drop
		tcp sport 6443 drop
	}
}`)
	cmd := node.NS.Command("nft", "-f", "-")
	cmd.Stdin = blackhole
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("black-hole the API server: %v: %s", err, out)
	}
	time.Sleep(16 * time.Second) // past the 15 s Lease
	node.NS.MustRun(t, "nft", "delete", "table", "inet", "outage")
	wg.Wait()
	t.Logf("allowed: %d/%d answered; denied: %d/%d answered", allowedGot, allowedSent, deniedGot, deniedSent)
	if allowedSent != n || allowedGot != allowedSent {
		t.Errorf("allowed stream lost packets during the outage: %d of %d answered", allowedGot, allowedSent)
	}
	if deniedGot != 0 {
		t.Errorf("%d denied datagrams passed during the outage", deniedGot)
	}
	if log := agent.Log(); !strings.Contains(log, "stopped leading") {
		t.Errorf("the agent did not notice the outage (it kept its Lease):\n%s", log)
	}
	select {
	case <-agent.Exited():
		t.Fatalf("egressd exited during the outage (code %d)", agent.ExitCode())
	default:
	}

	// The API server is back: the agent's watches recover and a change is enforced.
	start := time.Now()
	applyYAML(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 203.0.113.10/32}}
  - {type: Allow, to: {cidrSelector: 198.51.100.10/32}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}`)
	eventuallyReach(t, reach{p, "198.51.100.10:80", false, lab.OK}, 90*time.Second)
	t.Logf("a change made after the outage enforced %s later", time.Since(start).Round(time.Millisecond))
}
