package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedAgentRestartKeepsEnforcing: egressd is killed and restarted while a pod streams
// to an allowed and to a denied destination: no allowed datagram is lost, no denied one passes.
func TestPrivilegedAgentRestartKeepsEnforcing(t *testing.T) {
	privileged.Require(t)
	l, _, p := streamLab(t)
	checkStreamsThrough(t, p, 400, 10*time.Millisecond, "across the restart", func() { // 4 s of traffic
		time.Sleep(500 * time.Millisecond) // the scenario: streams flowing, then
		l.Nodes[0].Agent.Kill()            // a crash, mid-stream,
		time.Sleep(500 * time.Millisecond) // and half a second without an agent
		start := time.Now()
		if err := l.Nodes[0].StartAgent(context.Background()); err != nil {
			t.Error(err)
			return
		}
		t.Logf("agent back and ready %s after restart", time.Since(start).Round(time.Millisecond))
	})
}
