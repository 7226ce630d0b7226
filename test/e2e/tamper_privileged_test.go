package e2e

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedClassifierDeletedIsPutBack: the clsact qdisc of a firewalled pod's interface
// deleted on the node (by hand, or by another agent), egressd's filters with it: the agent
// attaches them again within moments, says so in its log and metrics, and the denied
// destination is denied again.
func TestPrivilegedClassifierDeletedIsPutBack(t *testing.T) {
	privileged.Require(t)
	l, _, p := streamLab(t)
	node, agent := l.Nodes[0], l.Nodes[0].Agent
	node.NS.MustRun(t, "tc", "qdisc", "del", "dev", p.HostLink, "clsact")
	poll.Eventually(t, "the classifier attached again", 3*time.Second, func() error {
		if v, err := agent.Sample("egressd_classifier_reattached_total"); err != nil || v != "2" {
			return errors.New("egressd_classifier_reattached_total " + v + ", want 2 (ingress and egress)")
		}
		return nil
	})
	if err := (reach{p, streamDenied, false, lab.Timeout}).check(); err != nil {
		t.Error(err)
	}
	if err := (reach{p, streamAllowed, false, lab.OK}).check(); err != nil {
		t.Error(err)
	}
	if log := agent.Log(); !strings.Contains(log, "classifier was deleted from a pod's interface behind its back") || !strings.Contains(log, "interface="+p.HostLink) {
		t.Errorf("the agent's log does not tell of the deletion on %s:\n%s", p.HostLink, log)
	}
}
