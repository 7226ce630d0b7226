package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedAPIServerOutageKeepsEnforcing: the node loses the API server (its packets
// dropped at the node, both ways) for longer than the leader Lease, while a pod streams to an
// allowed and to a denied destination. Enforcement does not change, the controller replica on
// the node notices (it stops leading), the agent keeps running, and once the API server is
// reachable again a change reaches the node.
func TestPrivilegedAPIServerOutageKeepsEnforcing(t *testing.T) {
	privileged.Require(t)
	l, ns, p := streamLab(t)
	node, agent := l.Nodes[0], l.Nodes[0].Agent
	checkStreamsThrough(t, p, 360, 50*time.Millisecond, "during the outage", func() { // 18 s of traffic
		time.Sleep(time.Second)                                           // streams flowing before the outage: part of the scenario
		cutAPIServer(t, node, "tcp dport 6443 drop; tcp sport 6443 drop") // black-holed
		time.Sleep(16 * time.Second)                                      // the outage under test: well past the Lease
		node.NS.MustRun(t, "nft", "delete", "table", "inet", "outage")
	})
	if log := node.Controller.Log(); !strings.Contains(log, "stopped leading") {
		t.Errorf("the controller did not notice the outage (it kept its Lease):\n%s", log)
	}
	select {
	case <-agent.Exited():
		t.Fatalf("egressd exited during the outage (code %d)", agent.ExitCode())
	default:
	}

	// The API server is back: the agent's watches recover and a change is enforced.
	start := time.Now()
	apply(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 203.0.113.10/32}}
  - {type: Allow, to: {cidrSelector: 198.51.100.10/32}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}`)
	poll.Eventually(t, "the change made after the outage enforced", 90*time.Second, reach{p, streamDenied, false, lab.OK}.check)
	t.Logf("a change made after the outage enforced %s later", time.Since(start).Round(time.Millisecond))
}

// outage is how long TestPrivilegedStatusAfterAPIServerOutage keeps the API server away: long
// enough for client-go's reflectors, failing to list, to back off to their longest waits
// ([30, 60) s).
const outage = 75 * time.Second

// TestPrivilegedStatusAfterAPIServerOutage: every node loses the API server (its connections
// refused, as when the API server is down) for over a minute, during which an EgressFirewall
// is created; it and one created once the API server is back get every node's status entry,
// and their aggregate, within seconds.
func TestPrivilegedStatusAfterAPIServerOutage(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 3, Agents: true})
	ns := l.CP.Namespace(t)
	applyFirewall(t, l, ns, denyTestNet)
	for _, n := range l.Nodes {
		cutAPIServer(t, n, "tcp dport 6443 reject with tcp reset") // refused, as by a stopped API server
	}
	// Meanwhile the objects change (each agent's status write hangs), then the outage ends.
	other := l.CP.Namespace(t)
	apply(t, l, other, denyTestNet)
	time.Sleep(outage)
	for _, n := range l.Nodes {
		n.NS.MustRun(t, "nft", "delete", "table", "inet", "outage")
	}
	time.Sleep(5 * time.Second)
	fresh := l.CP.Namespace(t)
	start := time.Now()
	apply(t, l, fresh, denyTestNet)
	for _, name := range []string{fresh, other} {
		for _, n := range l.Nodes {
			waitFirewallMessage(t, l, name, n.Name+": "+fwApplied)
		}
		if err := l.Kube.WaitField(context.Background(), "k8s.ovn.org/v1", "EgressFirewall", name, "default", "status.status", fwApplied, 10*time.Second); err != nil {
			t.Error(err)
		}
	}
	t.Logf("every entry %s after the new object", time.Since(start).Round(time.Millisecond))
}

// denyTestNet is an EgressFirewall whose outcome, not its rule, is under test.
const denyTestNet = `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Deny, to: {cidrSelector: 192.0.2.0/24}}`

// cutAPIServer cuts node n off the API server with rules (nft statements on its output hook),
// in table inet outage.
func cutAPIServer(t *testing.T, n *lab.Node, rules string) {
	t.Helper()
	cmd := n.NS.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader("table inet outage { chain out { type filter hook output priority 0; policy accept; " + rules + "; }; }")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cut %s off the API server: %v: %s", n.Name, err, out)
	}
}
