package e2e

import (
	"context"
	"fmt"
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

// TestDeployStatusPolicy: with deploy/node-policy.yaml installed, an agent writes its own node's
// entry in the status of EgressFirewall, AdminPolicyBasedExternalRoute (messages "<node>: ...")
// and EgressQoS (condition Ready-In-Zone-<node>) as it does (server-side apply, its node as field
// manager), and the aggregate and the removal of another node's entry as the leader does; it may
// not add or change another node's entry, nor write without the node-name claim.
func TestDeployStatusPolicy(t *testing.T) {
	cp := controlplane.Shared(t)
	ctx := context.Background()
	ns, user := agentUnderPolicies(t, cp, "status-policy.yaml")
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
		return versioned.NewForConfigOrDie(kube.ImpersonateConfig(cp.Config, user, ns, node))
	}
	// fw writes, as agent, status messages under field manager (a node's name, or the leader's).
	fw := func(agent versioned.Interface, manager string, msgs ...string) error {
		_, err := agent.K8sOVNV1().EgressFirewalls(ns).ApplyStatus(ctx, ovnac.EgressFirewall("default", ns).
			WithStatus(ovnac.EgressFirewallStatus().WithMessages(msgs...)), metav1.ApplyOptions{FieldManager: manager, Force: true})
		return err
	}
	const denied = "may add or change only its own node's status"
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
	if err := fw(b, other, other+": EgressFirewall Rules not correctly applied: boom"); err != nil {
		t.Errorf("the other node's agent writing its message: %v", err)
	}
	if err := fw(a, other, other+": EgressFirewall Rules applied"); err == nil || !strings.Contains(err.Error(), denied) {
		t.Errorf("the agent of %s changing %s's failure into a success: %v, want denied", own, other, err)
	}
	// The leader: the aggregate, and the removal of a node's entry (applying nothing as its manager).
	if _, err := a.K8sOVNV1().EgressFirewalls(ns).ApplyStatus(ctx, ovnac.EgressFirewall("default", ns).
		WithStatus(ovnac.EgressFirewallStatus().WithStatus("EgressFirewall Rules not correctly applied")), metav1.ApplyOptions{FieldManager: "egressd-leader", Force: true}); err != nil {
		t.Errorf("the leader writing the aggregate: %v", err)
	}
	if err := fw(a, other); err != nil {
		t.Errorf("the leader removing another node's entry: %v", err)
	}
	if err := fw(agentOn(""), "x", "x: EgressFirewall Rules applied"); err == nil || !strings.Contains(err.Error(), "node-name claim") {
		t.Errorf("an agent without the node-name claim: %v, want denied", err)
	}

	// AdminPolicyBasedExternalRoute: the same messages.
	apbr := func(agent versioned.Interface, manager, msg string) error {
		_, err := agent.K8sOVNV1().AdminPolicyBasedExternalRoutes().ApplyStatus(ctx, ovnac.AdminPolicyBasedExternalRoute(route).
			WithStatus(ovnac.AdminPolicyBasedRouteStatus().WithMessages(msg).WithLastTransitionTime(metav1.Now())), metav1.ApplyOptions{FieldManager: manager, Force: true})
		return err
	}
	if err := apbr(a, own, own+": configured external gateway IPs: 192.0.2.1"); err != nil {
		t.Errorf("the agent writing its own node's route message: %v", err)
	}
	if err := apbr(a, other, other+": configured external gateway IPs: 192.0.2.1"); err == nil || !strings.Contains(err.Error(), denied) {
		t.Errorf("the agent writing another node's route message: %v, want denied", err)
	}

	// EgressQoS: the node's condition.
	qos := func(node string) error {
		_, err := a.K8sOVNV1().EgressQoSes(ns).ApplyStatus(ctx, ovnac.EgressQoS("default", ns).WithStatus(ovnac.EgressQoSStatus().WithConditions(
			metav1ac.Condition().WithType("Ready-In-Zone-"+node).WithStatus(metav1.ConditionTrue).WithReason("SetupSucceeded").
				WithMessage("EgressQoS Rules applied").WithLastTransitionTime(metav1.Now()))), metav1.ApplyOptions{FieldManager: node, Force: true})
		return err
	}
	if err := qos(own); err != nil {
		t.Errorf("the agent writing its own node's QoS condition: %v", err)
	}
	if err := qos(other); err == nil || !strings.Contains(err.Error(), denied) {
		t.Errorf("the agent writing another node's QoS condition: %v, want denied", err)
	}
}
