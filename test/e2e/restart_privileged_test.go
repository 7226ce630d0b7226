package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedAgentRestartKeepsEnforcing: egressd is killed and restarted while a pod streams
// to an allowed and to a denied destination: no allowed datagram is lost, no denied one passes.
func TestPrivilegedAgentRestartKeepsEnforcing(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 1, Agents: true})
	ctx := context.Background()
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

	const n, every = 400, 10 * time.Millisecond // 4 s of traffic
	var wg sync.WaitGroup
	var allowedSent, allowedGot, deniedSent, deniedGot int
	wg.Go(func() { allowedSent, allowedGot, _ = p.UDPStream("203.0.113.10:80", n, every) })
	wg.Go(func() { deniedSent, deniedGot, _ = p.UDPStream("198.51.100.10:80", n, every) })
	time.Sleep(500 * time.Millisecond)
	l.Nodes[0].Agent.Kill() // a crash, mid-stream
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	if err := l.Nodes[0].StartAgent(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("agent back and ready %s after restart", time.Since(start).Round(time.Millisecond))
	wg.Wait()
	t.Logf("allowed: %d/%d answered; denied: %d/%d answered", allowedGot, allowedSent, deniedGot, deniedSent)
	if allowedSent != n || allowedGot != allowedSent {
		t.Errorf("allowed stream lost packets across the restart: %d of %d answered", allowedGot, allowedSent)
	}
	if deniedGot != 0 {
		t.Errorf("%d denied datagrams passed across the restart", deniedGot)
	}
}
