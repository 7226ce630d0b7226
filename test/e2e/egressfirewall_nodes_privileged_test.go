package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressFirewallNodeSelector: a nodeSelector rule covers every host address of the
// selected nodes as their agents publish them in k8s.ovn.org/host-cidrs, a secondary address
// added later included; a label change moves a node out of the rule.
func TestPrivilegedEgressFirewallNodeSelector(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 3, Agents: true, NodeLabels: map[int]map[string]string{1: {"role": "infra"}}})
	ctx := context.Background()
	n0, n1, n2 := l.Nodes[0], l.Nodes[1], l.Nodes[2]
	for _, n := range []*lab.Node{n1, n2} {
		if err := n.Serve(8080); err != nil {
			t.Fatal(err)
		}
	}
	ns := l.CP.Namespace(t)
	p := addPod(t, n0, ns, "p", lab.PodOptions{})
	// node-1's agent publishes its addresses.
	waitAnnotation(t, l, n1.Name, func(cidrs []string) bool { return slices.Contains(cidrs, n1.IPv4.String()+"/24") })

	applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {nodeSelector: {matchLabels: {role: infra}}}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
  - {type: Deny, to: {cidrSelector: "::/0"}}`)
	poll.Eventually(t, "the infra node allowed", 10*time.Second, reach{p, lab.HostPort(n1.IPv4, 8080), false, lab.OK}.check)
	checkReach(t, "infra node allowed", []reach{
		{p, lab.HostPort(n1.IPv6, 8080), false, lab.OK},
		{p, lab.HostPort(n2.IPv4, 8080), false, lab.Timeout},
	})

	// A secondary address on node-1 is published and then allowed.
	if _, err := n1.NS.Run("ip", "addr", "add", "172.18.1.13/24", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	if _, err := n0.NS.Run("ip", "route", "add", "172.18.1.13/32", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	waitAnnotation(t, l, n1.Name, func(cidrs []string) bool { return slices.Contains(cidrs, "172.18.1.13/24") })
	poll.Eventually(t, "the secondary address allowed", 10*time.Second, reach{p, "172.18.1.13:8080", false, lab.OK}.check)

	// node-1 loses the label: its addresses are denied again.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{"role": nil}}})
	if _, err := l.Client.CoreV1().Nodes().Patch(ctx, n1.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "the unlabelled node denied", 10*time.Second, reach{p, lab.HostPort(n1.IPv4, 8080), false, lab.Timeout}.check)
	checkReach(t, "label removed", []reach{{p, "172.18.1.13:8080", false, lab.Timeout}})
}

func waitAnnotation(t *testing.T, l *lab.Lab, node string, ok func([]string) bool) {
	t.Helper()
	poll.Eventually(t, node+" publishes its host-cidrs", 10*time.Second, func() error {
		n, err := l.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var cidrs []string
		_ = json.Unmarshal([]byte(n.Annotations["k8s.ovn.org/host-cidrs"]), &cidrs)
		if !ok(cidrs) {
			return fmt.Errorf("host-cidrs %v", cidrs)
		}
		return nil
	})
}
