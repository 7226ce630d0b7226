package e2e

import (
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
		time.Sleep(time.Second) // streams flowing before the outage: part of the scenario
		cmd := node.NS.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(`table inet outage {
	chain out {
		type filter hook output priority 0; policy accept;
		tcp dport 6443 drop
		tcp sport 6443 drop
	}
}`)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("black-hole the API server: %v: %s", err, out)
			return
		}
		time.Sleep(16 * time.Second) // the outage under test: well past the Lease
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
