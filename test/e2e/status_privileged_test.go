package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	egressdv1alpha1 "github.com/egressd/egressd/api/egressd/v1alpha1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ovnac "github.com/egressd/egressd/api/generated/applyconfiguration/k8sovn/v1"
	"github.com/egressd/egressd/api/generated/clientset/versioned"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedStatusFollowsNodes is upstream's status-manager scenario: a new node that has
// not reported makes the aggregate unknown (unset); once it is gone, the entry it wrote is
// removed and the aggregate is back to applied. A node's entry removed by someone else comes back.
func TestPrivilegedStatusFollowsNodes(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 1, Agents: true})
	ctx := context.Background()
	ns := l.CP.Namespace(t)
	applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec: {egress: [{type: Deny, to: {cidrSelector: 192.0.2.0/24}}]}`)

	ghost := "ghost-" + l.ID
	if _, err := l.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ghost}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Client.CoreV1().Nodes().Delete(context.Background(), ghost, metav1.DeleteOptions{}) })
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default", "status.status", "", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	// After a migration the aggregate may be one OVN-Kubernetes' cluster-manager wrote: the
	// leader takes it over and clears it while the ghost has not reported.
	egress := versioned.NewForConfigOrDie(l.CP.Config)
	upstream := ovnac.EgressFirewall("default", ns).WithStatus(ovnac.EgressFirewallStatus().WithStatus(fwApplied))
	if _, err := egress.K8sOVNV1().EgressFirewalls(ns).ApplyStatus(ctx, upstream, metav1.ApplyOptions{FieldManager: "cluster-manager", Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default", "status.status", "", 20*time.Second); err != nil {
		t.Fatalf("an aggregate written by upstream's cluster-manager was not cleared: %v", err)
	}
	// The ghost node's agent reports a failure (its NodeReport, past every change so far), then
	// the node is deleted.
	msg := ghost + ": EgressFirewall Rules not correctly applied: disk on fire"
	report := &egressdv1alpha1.NodeReport{ObjectMeta: metav1.ObjectMeta{Name: ghost},
		Programmed: egressdv1alpha1.Programmed{EgressFirewalls: "999999999"},
		Objects:    []egressdv1alpha1.ObjectOutcome{{Kind: "EgressFirewall", Namespace: ns, Name: "default", Failure: "disk on fire"}}}
	if _, err := egress.EgressdV1alpha1().NodeReports().Create(ctx, report, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = egress.EgressdV1alpha1().NodeReports().Delete(context.Background(), ghost, metav1.DeleteOptions{})
	})
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default", "status.status", fwNotApplied, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Client.CoreV1().Nodes().Delete(ctx, ghost, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default", "status.status", fwApplied, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ef, err := l.Kube.Get(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default")
	if err != nil {
		t.Fatal(err)
	}
	msgs, _, _ := unstructuredStrings(ef.Object, "status", "messages")
	if contains(msgs, msg) || !contains(msgs, l.Nodes[0].Name+": "+fwApplied) {
		t.Errorf("messages after the node left: %q", msgs)
	}

	// Someone removes the node's entry: its agent writes it back.
	node := l.Nodes[0].Name
	empty := ovnac.EgressFirewall("default", ns).WithStatus(ovnac.EgressFirewallStatus())
	if _, err := egress.K8sOVNV1().EgressFirewalls(ns).ApplyStatus(ctx, empty, metav1.ApplyOptions{FieldManager: node, Force: true}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "the node's status entry restored", 10*time.Second, func() error {
		ef, err := l.Kube.Get(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default")
		if err != nil {
			return err
		}
		if msgs, _, _ := unstructuredStrings(ef.Object, "status", "messages"); !contains(msgs, node+": "+fwApplied) {
			return fmt.Errorf("messages %q", msgs)
		}
		return nil
	})
}

// TestPrivilegedStatusIgnoreNodes: a node that --status-ignore-nodes selects (one egressd does
// not run on) is not waited for: the aggregate of EgressFirewall and EgressQoS is applied while
// it never reports; without the label the aggregate is unknown (unset) until it reports, and
// applied again once it is labelled.
func TestPrivilegedStatusIgnoreNodes(t *testing.T) {
	privileged.Require(t)
	const ignored = "example.com/no-egressd"
	l := lab.New(t, lab.Options{Nodes: 1, Agents: true, ControllerArgs: []string{"--status-ignore-nodes=" + ignored + "=true"}})
	ctx := context.Background()
	ns := l.CP.Namespace(t)
	windows := "windows-" + l.ID
	if _, err := l.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: windows,
		Labels: map[string]string{ignored: "true"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Client.CoreV1().Nodes().Delete(context.Background(), windows, metav1.DeleteOptions{}) })
	applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec: {egress: [{type: Deny, to: {cidrSelector: 192.0.2.0/24}}]}`)
	applyAndWait(t, l, ns, "apiVersion: k8s.ovn.org/v1\nkind: EgressQoS\nmetadata: {name: default}\nspec: {egress: [{dscp: 46}]}", qosApplied)

	wait := func(step, fw, qos string) {
		t.Helper()
		for kind, want := range map[string]string{"EgressFirewall": fw, "EgressQoS": qos} {
			if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", kind, ns, "default", "status.status", want, 20*time.Second); err != nil {
				t.Fatalf("%s: %v", step, err)
			}
		}
	}
	label := func(value *string) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{ignored: value}}})
		if _, err := l.Client.CoreV1().Nodes().Patch(ctx, windows, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label(nil)
	wait("the node no longer ignored", "", "")
	yes := "true"
	label(&yes)
	wait("the node ignored again", fwApplied, qosApplied)
}
