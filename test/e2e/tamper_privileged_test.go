package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
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

// TestPrivilegedNftablesTableDeletedIsWrittenAgain: egressd's nftables table deleted on the
// egress node (as a `nft flush ruleset` would): its SNAT is back within seconds, counted and
// logged, and the pod leaves with the egress IP again.
func TestPrivilegedNftablesTableDeletedIsWrittenAgain(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 1, Agents: true, NodeLabels: map[int]map[string]string{0: {assignable: ""}}})
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10"); err != nil {
		t.Fatal(err)
	}
	ns := l.CP.Namespace(t)
	p := addPod(t, l.Nodes[0], ns, "p", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	apply(t, l, "", fmt.Sprintf(`apiVersion: k8s.ovn.org/v1
kind: EgressIP
metadata: {name: eip-%s}
spec:
  egressIPs: [%q]
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: %s}
  podSelector:
    matchLabels: {app: eip}
`, ns, eip4, ns))
	name := "eip-" + ns
	t.Cleanup(func() { _ = l.Kube.Delete(context.Background(), "k8s.ovn.org/v1", "EgressIP", "", name) })
	eip := netip.MustParseAddr(eip4)
	eventuallySource(t, "before", p, "203.0.113.10:80", eip)
	node, agent := l.Nodes[0], l.Nodes[0].Agent
	node.NS.MustRun(t, "nft", "delete", "table", "inet", "egressd")
	eventuallySource(t, "after egressd's table was deleted", p, "203.0.113.10:80", eip)
	if v, err := agent.Sample("egressd_nftables_table_lost_total"); err != nil || v == "0" {
		t.Errorf("egressd_nftables_table_lost_total %q (%v), want it counted", v, err)
	}
	if !strings.Contains(agent.Log(), "nftables table was deleted or changed behind its back") {
		t.Error("the agent's log does not tell of its table deleted")
	}
}
