package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	egressdv1alpha1 "github.com/egressd/egressd/api/egressd/v1alpha1"
	egressdac "github.com/egressd/egressd/api/generated/applyconfiguration/egressd/v1alpha1"
	ovnac "github.com/egressd/egressd/api/generated/applyconfiguration/k8sovn/v1"
	"github.com/egressd/egressd/api/generated/clientset/versioned"
	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
	"github.com/egressd/egressd/test/poll"
)

// The refusals of deploy/nodereport-policy.yaml, as its messages say them.
const (
	reportNotOwn     = "may write only its own node's NodeReport"
	reportOwnerNotOK = "may be owned only by the agent's own Node"
	reportNoClaim    = "only with the node-name claim"
)

// TestDeployNodeReportPolicy: with deploy/nodereport-policy.yaml installed, an agent (its
// ServiceAccount with the node-name claim of its pod-bound token, and deploy/rbac.yaml) creates
// and updates its own node's NodeReport as it does (server-side apply, its node as field
// manager, its Node as owner); the policy refuses it a report named after another node
// (created or existing), a report owned by another Node, by something else or by more than
// its Node, and any report without the node-name claim. RBAC refuses it every delete of a
// report and every write of the status of EgressFirewall, EgressQoS and
// AdminPolicyBasedExternalRoute (the controller's). The controller (deploy/controller-rbac.yaml)
// lists and watches the reports and writes none. The garbage collector deletes a report with
// its Node.
func TestDeployNodeReportPolicy(t *testing.T) {
	cp := controlplane.Shared(t)
	ctx := context.Background()
	admin := cp.Client(t)
	adminEgressd := versioned.NewForConfigOrDie(cp.Config)
	u := underPolicies(t, cp, "nodereport-policy.yaml")
	ns := u.ns
	own, other, third := ns+"-a", ns+"-b", ns+"-c"
	nodes := map[string]*corev1.Node{}
	for _, n := range []string{own, other} {
		node, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes[n] = node
		t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	t.Cleanup(func() {
		for _, n := range []string{own, other, third} {
			_ = adminEgressd.EgressdV1alpha1().NodeReports().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})
	agentOn := func(node string) versioned.Interface {
		return versioned.NewForConfigOrDie(kube.ImpersonateConfig(cp.Config, u.agent, ns, node))
	}
	controller := versioned.NewForConfigOrDie(kube.ImpersonateConfig(cp.Config, u.controller, ns, ""))

	// nodeOwner is the owner reference an agent puts on its report: its Node.
	nodeOwner := func(node string) *metav1ac.OwnerReferenceApplyConfiguration {
		return metav1ac.OwnerReference().WithAPIVersion("v1").WithKind("Node").WithName(node).WithUID(nodes[node].UID)
	}
	// report is a NodeReport named name, owned by owners, programmed up to rv.
	report := func(name, rv string, owners ...*metav1ac.OwnerReferenceApplyConfiguration) *egressdac.NodeReportApplyConfiguration {
		return egressdac.NodeReport(name).WithOwnerReferences(owners...).
			WithProgrammed(egressdac.Programmed().WithEgressFirewalls(rv).WithEgressQoSes(rv).WithAdminPolicyBasedExternalRoutes(rv)).
			WithObjects(egressdac.ObjectOutcome().WithKind("EgressFirewall").WithNamespace("app").WithName("default").WithFailure("boom"))
	}
	// apply writes r as client does: server-side apply under manager, forced.
	apply := func(c versioned.Interface, manager string, r *egressdac.NodeReportApplyConfiguration, dryRun ...string) error {
		_, err := c.EgressdV1alpha1().NodeReports().Apply(ctx, r, metav1.ApplyOptions{FieldManager: manager, Force: true, DryRun: dryRun})
		return err
	}
	stored := func(name string) (*egressdv1alpha1.NodeReport, error) {
		return adminEgressd.EgressdV1alpha1().NodeReports().Get(ctx, name, metav1.GetOptions{})
	}
	// byPolicy checks that err is the policy's refusal saying why.
	byPolicy := func(what string, err error, why string) {
		t.Helper()
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v, want Invalid (%s)", what, err, why)
		}
	}
	byRBAC := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden (RBAC)", what, err)
		}
	}

	a := agentOn(own)
	// The agent's grants and the policy take effect once the API server has them: before, the
	// agent is Forbidden, then allowed. A dry run goes through admission and stores nothing.
	poll.Eventually(t, "the agent's RBAC and the NodeReport policy in force", 30*time.Second, func() error {
		err := apply(a, own, report(other, "1", nodeOwner(other)), metav1.DryRunAll)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), reportNotOwn) {
			return fmt.Errorf("the agent of %s creating %s's report (dry run): %v", own, other, err)
		}
		return nil
	})

	// Its own report: created by the first apply, updated by the next.
	if err := apply(a, own, report(own, "10", nodeOwner(own))); err != nil {
		t.Fatalf("the agent creating its own node's report: %v", err)
	}
	if err := apply(a, own, report(own, "11", nodeOwner(own))); err != nil {
		t.Fatalf("the agent updating its own node's report: %v", err)
	}
	r, err := stored(own)
	if err != nil {
		t.Fatal(err)
	}
	if r.Programmed.EgressFirewalls != "11" || len(r.OwnerReferences) != 1 || r.OwnerReferences[0].Kind != "Node" ||
		r.OwnerReferences[0].Name != own || r.OwnerReferences[0].UID != nodes[own].UID {
		t.Fatalf("the agent's report as stored: programmed %+v, owners %+v, want 11 and Node %s", r.Programmed, r.OwnerReferences, own)
	}
	ownVersion := r.ResourceVersion

	// Another node's report: neither created nor changed.
	byPolicy("the agent of "+own+" creating "+other+"'s report", apply(a, own, report(other, "1", nodeOwner(other))), reportNotOwn)
	if _, err := stored(other); !apierrors.IsNotFound(err) {
		t.Errorf("%s's report after the refused create: %v, want NotFound", other, err)
	}
	if err := apply(agentOn(other), other, report(other, "20", nodeOwner(other))); err != nil {
		t.Fatalf("the agent of %s creating its own report: %v", other, err)
	}
	r, err = stored(other)
	if err != nil {
		t.Fatal(err)
	}
	otherVersion := r.ResourceVersion
	byPolicy("the agent of "+own+" updating "+other+"'s report", apply(a, own, report(other, "21", nodeOwner(other))), reportNotOwn)
	byPolicy("the agent of "+own+" updating "+other+"'s report under its manager", apply(a, other, report(other, "21", nodeOwner(other))), reportNotOwn)
	byPolicy("the agent of "+own+" making "+other+"'s report its own", apply(a, own, report(other, "21", nodeOwner(own))), reportNotOwn)

	// Its own report, owned by anything but its Node alone.
	byPolicy("the agent owning its report by another Node", apply(a, own, report(own, "12", nodeOwner(other))), reportOwnerNotOK)
	byPolicy("the agent owning its report by another Node too", apply(a, own, report(own, "12", nodeOwner(own), nodeOwner(other))), reportOwnerNotOK)
	byPolicy("the agent owning its report by a ConfigMap of its node's name", apply(a, own, report(own, "12",
		metav1ac.OwnerReference().WithAPIVersion("v1").WithKind("ConfigMap").WithName(own).WithUID(nodes[own].UID))), reportOwnerNotOK)
	byPolicy("the agent owning its report by a Node of another API", apply(a, own, report(own, "12",
		metav1ac.OwnerReference().WithAPIVersion("example.com/v1").WithKind("Node").WithName(own).WithUID(nodes[own].UID))), reportOwnerNotOK)
	// ... nor created so (a node without a report yet).
	byPolicy("the agent of "+third+" creating its report owned by "+other, apply(agentOn(third), third, report(third, "1", nodeOwner(other))), reportOwnerNotOK)
	if _, err := stored(third); !apierrors.IsNotFound(err) {
		t.Errorf("%s's report after the refused create: %v, want NotFound", third, err)
	}

	// Without the node-name claim, no report at all.
	byPolicy("an agent without the node-name claim updating a report", apply(agentOn(""), own, report(own, "13", nodeOwner(own))), reportNoClaim)
	byPolicy("an agent without the node-name claim creating a report", apply(agentOn(""), third, report(third, "1")), reportNoClaim)

	// No delete: a report goes with its Node.
	byRBAC("the agent deleting its own report", a.EgressdV1alpha1().NodeReports().Delete(ctx, own, metav1.DeleteOptions{}))
	byRBAC("the agent deleting another node's report", a.EgressdV1alpha1().NodeReports().Delete(ctx, other, metav1.DeleteOptions{}))
	byRBAC("the agent deleting every report", a.EgressdV1alpha1().NodeReports().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
	_, err = a.EgressdV1alpha1().NodeReports().Get(ctx, other, metav1.GetOptions{})
	byRBAC("the agent reading another node's report", err)

	// The reports as they were.
	for name, version := range map[string]string{own: ownVersion, other: otherVersion} {
		if r, err := stored(name); err != nil || r.ResourceVersion != version {
			t.Errorf("%s's report after the refused writes: %+v (%v), want resourceVersion %s", name, r, err, version)
		}
	}

	// No status of the objects the reports are about: the controller's, written from them.
	_, err = a.K8sOVNV1().EgressFirewalls(ns).ApplyStatus(ctx, ovnac.EgressFirewall("default", ns).
		WithStatus(ovnac.EgressFirewallStatus().WithMessages(own+": EgressFirewall Rules applied")), metav1.ApplyOptions{FieldManager: own, Force: true})
	byRBAC("the agent writing an EgressFirewall's status", err)
	_, err = a.K8sOVNV1().EgressQoSes(ns).ApplyStatus(ctx, ovnac.EgressQoS("default", ns).
		WithStatus(ovnac.EgressQoSStatus().WithStatus("EgressQoS Rules applied")), metav1.ApplyOptions{FieldManager: own, Force: true})
	byRBAC("the agent writing an EgressQoS's status", err)
	_, err = a.K8sOVNV1().AdminPolicyBasedExternalRoutes().ApplyStatus(ctx, ovnac.AdminPolicyBasedExternalRoute("gws-"+ns).
		WithStatus(ovnac.AdminPolicyBasedRouteStatus().WithMessages(own+": configured external gateway IPs: 192.0.2.1")), metav1.ApplyOptions{FieldManager: own, Force: true})
	byRBAC("the agent writing an AdminPolicyBasedExternalRoute's status", err)

	// The controller reads the reports, as its informer does (a list, then a watch from it),
	// and writes none.
	var list *egressdv1alpha1.NodeReportList
	poll.Eventually(t, "the controller listing the reports", 30*time.Second, func() error {
		list, err = controller.EgressdV1alpha1().NodeReports().List(ctx, metav1.ListOptions{})
		return err
	})
	listed := map[string]bool{}
	for _, r := range list.Items {
		listed[r.Name] = true
	}
	if !listed[own] || !listed[other] {
		t.Errorf("the controller's list holds %v, want %s and %s", listed, own, other)
	}
	w, err := controller.EgressdV1alpha1().NodeReports().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("the controller watching the reports: %v", err)
	}
	defer w.Stop()
	if err := apply(a, own, report(own, "14", nodeOwner(own))); err != nil {
		t.Fatalf("the agent updating its own report: %v", err)
	}
	if err := watchFor(w, 30*time.Second, func(e watch.Event) bool {
		r, ok := e.Object.(*egressdv1alpha1.NodeReport)
		return ok && e.Type == watch.Modified && r.Name == own && r.Programmed.EgressFirewalls == "14"
	}); err != nil {
		t.Errorf("the controller's watch: %v, want %s's update", err, own)
	}
	_, err = controller.EgressdV1alpha1().NodeReports().Create(ctx, &egressdv1alpha1.NodeReport{ObjectMeta: metav1.ObjectMeta{Name: third}}, metav1.CreateOptions{})
	byRBAC("the controller creating a report", err)
	byRBAC("the controller applying a report", apply(controller, "egressd-leader", report(own, "99", nodeOwner(own))))
	byRBAC("the controller deleting a report", controller.EgressdV1alpha1().NodeReports().Delete(ctx, own, metav1.DeleteOptions{}))

	// The garbage collector deletes a report with its Node (the owner reference the policy
	// requires is one it follows).
	if err := admin.CoreV1().Nodes().Delete(ctx, other, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, other+"'s report deleted with its Node", 2*time.Minute, func() error {
		if _, err := stored(other); !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s's report: %v", other, err)
		}
		return nil
	})
	if _, err := stored(own); err != nil {
		t.Errorf("%s's report after %s's Node went: %v", own, other, err)
	}
}

// watchFor reads w until an event matches, or until timeout.
func watchFor(w watch.Interface, timeout time.Duration, match func(watch.Event) bool) error {
	deadline := time.After(timeout)
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("the watch ended")
			}
			if e.Type == watch.Error {
				return fmt.Errorf("a watch error: %v", e.Object)
			}
			if match(e) {
				return nil
			}
		case <-deadline:
			return fmt.Errorf("no such event within %s", timeout)
		}
	}
}
