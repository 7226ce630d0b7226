package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	egressdv1alpha1 "github.com/egressd/egressd/api/egressd/v1alpha1"
	"github.com/egressd/egressd/api/generated/clientset/versioned"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedStatusFromNodeReports: each node's agent writes one NodeReport (owned by its
// Node, saying up to which resourceVersion its dataplane holds the EgressFirewalls), and the
// controller alone writes the EgressFirewall's status from them: no node is a field manager
// of the object, and a cluster above --status-node-entries-up-to nodes (1 here) shows the
// aggregate without per-node entries. An edit is applied again on every node; a restarted
// controller finds every node already there and leaves the status as it is.
func TestPrivilegedStatusFromNodeReports(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, Agents: true, ControllerArgs: []string{"--status-node-entries-up-to=1"}})
	ctx := context.Background()
	ns := l.CP.Namespace(t)
	addPod(t, l.Nodes[0], ns, "a0", lab.PodOptions{})
	c := versioned.NewForConfigOrDie(l.CP.Config)

	apply(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Deny, to: {cidrSelector: 192.0.2.0/24}}`)
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default", "status.status", fwApplied, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ef, err := c.K8sOVNV1().EgressFirewalls(ns).Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ef.Status.Messages) != 0 {
		t.Errorf("messages %v above --status-node-entries-up-to, want none (no node failed)", ef.Status.Messages)
	}
	for _, m := range ef.ManagedFields {
		for _, n := range l.Nodes {
			if m.Manager == n.Name {
				t.Errorf("node %s is a field manager of the EgressFirewall (%s %s): agents must not write it", n.Name, m.Operation, m.Subresource)
			}
		}
	}
	// A report follows the controller's status writes within a second (a status-only event
	// moves it without a sync).
	checkReports := func(step, atLeast string) {
		t.Helper()
		for _, n := range l.Nodes {
			var r *egressdv1alpha1.NodeReport
			err := poll.Until(ctx, n.Name+"'s report", 5*time.Second, func() error {
				var err error
				if r, err = c.EgressdV1alpha1().NodeReports().Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
					return err
				}
				if cmp, err := resourceversion.CompareResourceVersion(r.Programmed.EgressFirewalls, atLeast); err != nil || cmp < 0 {
					return fmt.Errorf("programmed EgressFirewalls through %q, want at least %s (%v)", r.Programmed.EgressFirewalls, atLeast, err)
				}
				return nil
			})
			if err != nil {
				t.Errorf("%s: %s's NodeReport: %v", step, n.Name, err)
				continue
			}
			node, err := l.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if refs := r.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].Name != n.Name || refs[0].UID != node.UID {
				t.Errorf("%s: %s's NodeReport is owned by %+v, want its Node", step, n.Name, refs)
			}
		}
	}
	checkReports("created", ef.ResourceVersion)

	// An edit: the aggregate is applied again once every node holds the new generation.
	ef.Spec.Egress[0].To.CIDRSelector = "198.51.100.0/24"
	edited, err := c.K8sOVNV1().EgressFirewalls(ns).Update(ctx, ef, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		cur, err := c.K8sOVNV1().EgressFirewalls(ns).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cmp, _ := resourceversion.CompareResourceVersion(cur.ResourceVersion, edited.ResourceVersion); cur.Status.Status == fwApplied && cmp > 0 {
			break // applied, written after the edit
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the edit: status %q at %s, want %q written after %s", cur.Status.Status, cur.ResourceVersion, fwApplied, edited.ResourceVersion)
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkReports("edited", edited.ResourceVersion)

	// The controller restarted: it learns each object's generation anew, at its current
	// resourceVersion, which the nodes' reports have passed (a status-only event moves them):
	// no status goes back to unknown.
	leader := l.LeaderNode(ctx)
	leader.Controller.Kill()
	if err := leader.StartController(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := c.K8sOVNV1().EgressFirewalls(ns).Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.K8sOVNV1().EgressFirewalls(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: before.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	quiet := time.After(5 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			t.Errorf("the restarted controller changed the status: %s %+v", ev.Type, ev.Object)
		case <-quiet:
			done = true
		}
	}
}
