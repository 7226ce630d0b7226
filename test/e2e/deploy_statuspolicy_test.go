package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	ovnac "github.com/egressd/egressd/api/generated/applyconfiguration/k8sovn/v1"
	"github.com/egressd/egressd/api/generated/clientset/versioned"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
	"github.com/egressd/egressd/test/poll"
)

// TestDeployStatusPolicy: with deploy/status-policy.yaml installed, an agent writes its own
// node's entry in the status of EgressFirewall, AdminPolicyBasedExternalRoute (messages
// "<node>: ...") and EgressQoS (condition Ready-In-Zone-<node>) as it does (server-side apply,
// its node as field manager), and removes it; it may not add, change or remove another node's
// entry, nor write the aggregate status.status, nor write without the node-name claim. The
// controller (its own ServiceAccount) writes the aggregate and removes a gone node's entry.
func TestDeployStatusPolicy(t *testing.T) {
	cp := controlplane.Shared(t)
	ctx := context.Background()
	u := underPolicies(t, cp, "status-policy.yaml")
	ns := u.ns
	own, other := ns+"-a", ns+"-b"
	admin := versioned.NewForConfigOrDie(cp.Config)
	if _, err := admin.K8sOVNV1().EgressFirewalls(ns).Create(ctx, &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: ovnv1.EgressFirewallSpec{Egress: []ovnv1.EgressFirewallRule{{Type: "Deny", To: ovnv1.EgressFirewallDestination{CIDRSelector: "192.0.2.0/24"}}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.K8sOVNV1().EgressQoSes(ns).Create(ctx, &ovnv1.EgressQoS{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: ovnv1.EgressQoSSpec{Egress: []ovnv1.EgressQoSRule{{DSCP: 46}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	route := "gws-" + ns
	if _, err := admin.K8sOVNV1().AdminPolicyBasedExternalRoutes().Create(ctx, &ovnv1.AdminPolicyBasedExternalRoute{ObjectMeta: metav1.ObjectMeta{Name: route},
		Spec: ovnv1.ExternalRouteSpec{From: ovnv1.ExternalNetworkSource{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}},
			NextHops: ovnv1.ExternalNextHops{StaticHops: []*ovnv1.StaticHop{{IP: "192.0.2.1"}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.K8sOVNV1().AdminPolicyBasedExternalRoutes().Delete(context.Background(), route, metav1.DeleteOptions{})
	})
	agentOn := func(node string) versioned.Interface {
		return versioned.NewForConfigOrDie(kube.ImpersonateConfig(cp.Config, u.agent, ns, node))
	}
	controller := versioned.NewForConfigOrDie(kube.ImpersonateConfig(cp.Config, u.controller, ns, ""))
	// fw writes, as client, status messages under field manager (a node's name, or the
	// leader's): applying none removes those the manager wrote.
	fw := func(client versioned.Interface, manager string, msgs ...string) error {
		_, err := client.K8sOVNV1().EgressFirewalls(ns).ApplyStatus(ctx, ovnac.EgressFirewall("default", ns).
			WithStatus(ovnac.EgressFirewallStatus().WithMessages(msgs...)), metav1.ApplyOptions{FieldManager: manager, Force: true})
		return err
	}
	fwAggregate := func(client versioned.Interface, status string) error {
		_, err := client.K8sOVNV1().EgressFirewalls(ns).ApplyStatus(ctx, ovnac.EgressFirewall("default", ns).
			WithStatus(ovnac.EgressFirewallStatus().WithStatus(status)), metav1.ApplyOptions{FieldManager: "egressd-leader", Force: true})
		return err
	}
	// fwStatus is the EgressFirewall's status as stored.
	fwStatus := func() ovnv1.EgressFirewallStatus {
		t.Helper()
		f, err := admin.K8sOVNV1().EgressFirewalls(ns).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return f.Status
	}
	const denied = "may add, change or remove only its own node's status"
	const aggregateDenied = "may not write the aggregate status"
	a := agentOn(own)
	// The policy takes effect once the API server has it; a probe let through before that stays
	// in the status (and an entry kept is allowed), so each probe writes a new one.
	probe := 0
	poll.Eventually(t, "the agent of "+own+" is denied writing "+other+"'s entry", 20*time.Second, func() error {
		probe++
		if err := fw(a, other, fmt.Sprintf("%s: EgressFirewall Rules applied (%d)", other, probe)); err == nil || !strings.Contains(err.Error(), denied) {
			return fmt.Errorf("%v", err)
		}
		return nil
	})
	if err := fw(a, own, own+": EgressFirewall Rules applied"); err != nil {
		t.Errorf("the agent writing its own node's message: %v", err)
	}
	b := agentOn(other)
	failure := other + ": EgressFirewall Rules not correctly applied: boom"
	if err := fw(b, other, failure); err != nil {
		t.Errorf("the other node's agent writing its message: %v", err)
	}
	if err := fw(a, other, other+": EgressFirewall Rules applied"); err == nil || !strings.Contains(err.Error(), denied) {
		t.Errorf("the agent of %s changing %s's failure into a success: %v, want denied", own, other, err)
	}
	// Removing another node's failure would hide it from the aggregate.
	if err := fw(a, other); err == nil || !strings.Contains(err.Error(), denied) {
		t.Errorf("the agent of %s removing %s's entry: %v, want denied", own, other, err)
	}
	if err := fwAggregate(a, "EgressFirewall Rules applied"); err == nil || !strings.Contains(err.Error(), aggregateDenied) {
		t.Errorf("the agent writing the aggregate: %v, want denied", err)
	}
	if err := fw(agentOn(""), "x", "x: EgressFirewall Rules applied"); err == nil || !strings.Contains(err.Error(), "node-name claim") {
		t.Errorf("an agent without the node-name claim: %v, want denied", err)
	}
	if st := fwStatus(); st.Status != "" || !slices.Contains(st.Messages, failure) || !slices.Contains(st.Messages, own+": EgressFirewall Rules applied") {
		t.Errorf("after the denied writes the status is %+v, want %s's failure and %s's success, no aggregate", st, other, own)
	}
	// The controller: the aggregate, and the removal of a gone node's entry (applying nothing
	// as its manager).
	if err := fwAggregate(controller, "EgressFirewall Rules not correctly applied"); err != nil {
		t.Errorf("the controller writing the aggregate: %v", err)
	}
	if err := fw(controller, other); err != nil {
		t.Errorf("the controller removing a gone node's entry: %v", err)
	}
	// An agent removes its own entry (its node no longer programs the object).
	if err := fw(a, own); err != nil {
		t.Errorf("the agent removing its own entry: %v", err)
	}
	if st := fwStatus(); st.Status != "EgressFirewall Rules not correctly applied" || len(st.Messages) != 0 {
		t.Errorf("the status is %+v, want the controller's aggregate and no entry", st)
	}

	// AdminPolicyBasedExternalRoute: the same messages, the aggregate Success or Fail.
	apbr := func(client versioned.Interface, manager, msg string) error {
		_, err := client.K8sOVNV1().AdminPolicyBasedExternalRoutes().ApplyStatus(ctx, ovnac.AdminPolicyBasedExternalRoute(route).
			WithStatus(ovnac.AdminPolicyBasedRouteStatus().WithMessages(msg).WithLastTransitionTime(metav1.Now())), metav1.ApplyOptions{FieldManager: manager, Force: true})
		return err
	}
	apbrAggregate := func(client versioned.Interface, status ovnv1.StatusType) error {
		_, err := client.K8sOVNV1().AdminPolicyBasedExternalRoutes().ApplyStatus(ctx, ovnac.AdminPolicyBasedExternalRoute(route).
			WithStatus(ovnac.AdminPolicyBasedRouteStatus().WithStatus(status)), metav1.ApplyOptions{FieldManager: "egressd-leader", Force: true})
		return err
	}
	if err := apbr(a, own, own+": configured external gateway IPs: 192.0.2.1"); err != nil {
		t.Errorf("the agent writing its own node's route message: %v", err)
	}
	if err := apbr(a, other, other+": configured external gateway IPs: 192.0.2.1"); err == nil || !strings.Contains(err.Error(), denied) {
		t.Errorf("the agent writing another node's route message: %v, want denied", err)
	}
	if err := apbrAggregate(a, ovnv1.SuccessStatus); err == nil || !strings.Contains(err.Error(), aggregateDenied) {
		t.Errorf("the agent writing the route's aggregate: %v, want denied", err)
	}
	if err := apbrAggregate(controller, ovnv1.SuccessStatus); err != nil {
		t.Errorf("the controller writing the route's aggregate: %v", err)
	}

	// EgressQoS: the node's condition.
	qos := func(node string) error {
		_, err := a.K8sOVNV1().EgressQoSes(ns).ApplyStatus(ctx, ovnac.EgressQoS("default", ns).WithStatus(ovnac.EgressQoSStatus().WithConditions(
			metav1ac.Condition().WithType("Ready-In-Zone-"+node).WithStatus(metav1.ConditionTrue).WithReason("SetupSucceeded").
				WithMessage("EgressQoS Rules applied").WithLastTransitionTime(metav1.Now()))), metav1.ApplyOptions{FieldManager: node, Force: true})
		return err
	}
	qosAggregate := func(client versioned.Interface) error {
		_, err := client.K8sOVNV1().EgressQoSes(ns).ApplyStatus(ctx, ovnac.EgressQoS("default", ns).WithStatus(ovnac.EgressQoSStatus().
			WithStatus("EgressQoS Rules applied")), metav1.ApplyOptions{FieldManager: "egressd-leader", Force: true})
		return err
	}
	if err := qos(own); err != nil {
		t.Errorf("the agent writing its own node's QoS condition: %v", err)
	}
	if err := qos(other); err == nil || !strings.Contains(err.Error(), denied) {
		t.Errorf("the agent writing another node's QoS condition: %v, want denied", err)
	}
	if err := qosAggregate(a); err == nil || !strings.Contains(err.Error(), aggregateDenied) {
		t.Errorf("the agent writing the QoS aggregate: %v, want denied", err)
	}
	if err := qosAggregate(controller); err != nil {
		t.Errorf("the controller writing the QoS aggregate: %v", err)
	}
}
