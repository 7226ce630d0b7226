package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	cloudv1 "github.com/egressd/egressd/api/cloudnetwork/v1"
	egressdac "github.com/egressd/egressd/api/generated/applyconfiguration/egressd/v1alpha1"
	ovnac "github.com/egressd/egressd/api/generated/applyconfiguration/k8sovn/v1"
	"github.com/egressd/egressd/api/generated/clientset/versioned"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
	"github.com/egressd/egressd/test/poll"
)

// TestDeployAgentLimits attacks the real API server with an agent's credentials (its
// ServiceAccount with the node-name claim of its pod-bound token), the RBAC of deploy/ and its
// admission policies installed: the API server itself refuses every cluster-wide write (a pod,
// the Lease, an EgressIP's status, a cloud request, a Node label, the status of an
// EgressFirewall: another node's failure there or the verdict, another node's NodeReport), with
// RBAC's Forbidden or a policy's Invalid, and the object stays as it was. A stolen agent token
// hurts one node, not the cluster. The controller's credentials make those writes, within the
// policies' bounds.
func TestDeployAgentLimits(t *testing.T) {
	cp := controlplane.Shared(t)
	admin := cp.Client(t)
	adminOVN := versioned.NewForConfigOrDie(cp.Config)
	ctx := context.Background()
	u := underPolicies(t, cp, "node-policy.yaml", "nodereport-policy.yaml", "router-pod-policy.yaml")
	ns := u.ns
	own, other := ns+"-a", ns+"-b"
	nodes := map[string]*corev1.Node{}
	for _, n := range []string{own, other} {
		node, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"role": "worker"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes[n] = node
		t.Cleanup(func() {
			_ = admin.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{})
			_ = adminOVN.EgressdV1alpha1().NodeReports().Delete(context.Background(), n, metav1.DeleteOptions{})
		})
	}
	agentCfg := kube.ImpersonateConfig(cp.Config, u.agent, ns, own)
	agent, agentOVN := kubernetes.NewForConfigOrDie(agentCfg), versioned.NewForConfigOrDie(agentCfg)
	ctrlCfg := kube.ImpersonateConfig(cp.Config, u.controller, ns, "")
	ctrl, ctrlOVN := kubernetes.NewForConfigOrDie(ctrlCfg), versioned.NewForConfigOrDie(ctrlCfg)

	// Refusals count only once the agent's grants and the policies are in force: the agent
	// publishes its annotations, and a label on its own Node is refused by the policy.
	patchNode := func(c kubernetes.Interface, node, p string) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(p), metav1.PatchOptions{FieldManager: "egressd"})
		return err
	}
	// (A probe let through before stays: each probe is a new value, a change to refuse.)
	probe := 0
	poll.Eventually(t, "the agent's RBAC and the node policy in force", 30*time.Second, func() error {
		probe++
		if err := patchNode(agent, own, `{"metadata":{"annotations":{"k8s.ovn.org/host-cidrs":"[\"172.18.0.2/16\"]"}}}`); err != nil {
			return fmt.Errorf("publishing its annotations: %w", err)
		}
		if err := patchNode(agent, own, fmt.Sprintf(`{"metadata":{"labels":{"probe":"%d"}}}`, probe)); !apierrors.IsInvalid(err) {
			return fmt.Errorf("a label: %v", err)
		}
		return nil
	})
	if probe > 1 { // labels let through before the policy was in force
		if err := patchNode(admin, own, `{"metadata":{"labels":{"probe":null}}}`); err != nil {
			t.Fatal(err)
		}
	}
	// refused checks that err is the API server's refusal of the expected kind.
	refused := func(what string, err error, forbidden bool) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("the agent %s: allowed", what)
		case forbidden && !apierrors.IsForbidden(err):
			t.Errorf("the agent %s: %v, want Forbidden (RBAC)", what, err)
		case !forbidden && !apierrors.IsInvalid(err):
			t.Errorf("the agent %s: %v, want Invalid (an admission policy)", what, err)
		}
	}
	// refusedByPolicy checks that err is a policy's refusal saying why.
	refusedByPolicy := func(what string, err error, why string) {
		t.Helper()
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), why) {
			t.Errorf("the agent %s: %v, want Invalid (%s)", what, err, why)
		}
	}
	const byRBAC, byPolicy = true, false

	// The objects under attack, as an admin makes them.
	er, err := adminOVN.NetworkOperatorV1().EgressRouters(ns).Create(ctx, &netopv1.EgressRouter{
		ObjectMeta: metav1.ObjectMeta{Name: "router"},
		Spec: netopv1.EgressRouterSpec{Mode: netopv1.EgressRouterModeRedirect,
			NetworkInterface: netopv1.EgressRouterInterface{Macvlan: netopv1.MacvlanConfig{Mode: netopv1.MacvlanModeBridge}},
			Addresses:        []netopv1.EgressRouterAddress{{IP: "192.0.2.99/24", Gateway: "192.0.2.1"}},
			Redirect:         &netopv1.RedirectConfig{FallbackIP: "203.0.113.10"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var workload *corev1.Pod
	// Pod admission looks up the namespace's default ServiceAccount, made asynchronously.
	poll.Eventually(t, "a workload pod", 30*time.Second, func() error {
		workload, err = admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: other, Containers: []corev1.Container{{Name: "web", Image: "registry.example/web"}}}}, metav1.CreateOptions{})
		return err
	})
	lease, err := admin.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("egressd-controller-0"), LeaseDurationSeconds: ptr.To[int32](15)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eipName := "eip-" + ns
	if _, err := adminOVN.K8sOVNV1().EgressIPs().Create(ctx, &ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: eipName},
		Spec:   ovnv1.EgressIPSpec{EgressIPs: []ovnv1.IPAddress{"192.0.2.77"}, NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
		Status: ovnv1.EgressIPStatus{Items: []ovnv1.EgressIPStatusItem{}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = adminOVN.K8sOVNV1().EgressIPs().Delete(context.Background(), eipName, metav1.DeleteOptions{})
	})
	if _, err := adminOVN.K8sOVNV1().EgressFirewalls(ns).Create(ctx, &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: ovnv1.EgressFirewallSpec{Egress: []ovnv1.EgressFirewallRule{{Type: "Deny", To: ovnv1.EgressFirewallDestination{CIDRSelector: "192.0.2.0/24"}}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applyFW := func(c versioned.Interface, manager string, st *ovnac.EgressFirewallStatusApplyConfiguration) error {
		_, err := c.K8sOVNV1().EgressFirewalls(ns).ApplyStatus(ctx, ovnac.EgressFirewall("default", ns).WithStatus(st),
			metav1.ApplyOptions{FieldManager: manager, Force: true})
		return err
	}
	// report is node's NodeReport as its agent writes it (owned by owner, its Node), with the
	// EgressFirewall's failure on the node, if any.
	report := func(node string, owner *corev1.Node, failure string) *egressdac.NodeReportApplyConfiguration {
		r := egressdac.NodeReport(node).WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion("v1").WithKind("Node").
			WithName(owner.Name).WithUID(owner.UID)).WithProgrammed(egressdac.Programmed().WithEgressFirewalls("1"))
		if failure != "" {
			r.WithObjects(egressdac.ObjectOutcome().WithKind("EgressFirewall").WithNamespace(ns).WithName("default").WithFailure(failure))
		}
		return r
	}
	applyReport := func(c versioned.Interface, manager string, r *egressdac.NodeReportApplyConfiguration, dryRun ...string) error {
		_, err := c.EgressdV1alpha1().NodeReports().Apply(ctx, r, metav1.ApplyOptions{FieldManager: manager, Force: true, DryRun: dryRun})
		return err
	}
	// The other node reports a failure, and the controller writes the status from the reports:
	// that node's failure and the verdict.
	if err := applyReport(versioned.NewForConfigOrDie(kube.ImpersonateConfig(cp.Config, u.agent, ns, other)), other,
		report(other, nodes[other], "boom")); err != nil {
		t.Fatalf("the other node's agent writing its report: %v", err)
	}
	otherReport, err := adminOVN.EgressdV1alpha1().NodeReports().Get(ctx, other, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	otherFailure := other + ": EgressFirewall Rules not correctly applied: boom"
	const verdict = "EgressFirewall Rules not correctly applied"
	poll.Eventually(t, "the controller writes the status", 20*time.Second, func() error {
		return applyFW(ctrlOVN, "egressd-leader", ovnac.EgressFirewallStatus().WithStatus(verdict).WithMessages(otherFailure))
	})

	// The NodeReport and router-pod policies in force too: a dry run goes through admission and
	// changes nothing, so it can probe until the policy refuses.
	dry := []string{metav1.DryRunAll}
	poll.Eventually(t, "the NodeReport and router-pod policies in force", 30*time.Second, func() error {
		if err := applyReport(agentOVN, own, report(other, nodes[other], ""), dry...); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), reportNotOwn) {
			return fmt.Errorf("the agent writing another node's report (dry run): %v", err)
		}
		if err := ctrl.CoreV1().Pods(ns).Delete(ctx, workload.Name, metav1.DeleteOptions{DryRun: dry}); !apierrors.IsInvalid(err) {
			return fmt.Errorf("the controller deleting a workload pod (dry run): %v", err)
		}
		return nil
	})

	// The attacks.
	routerPod := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "router-", Labels: map[string]string{"app": "egress-router-cni"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: netopv1.SchemeGroupVersion.String(), Kind: "EgressRouter",
					Name: er.Name, UID: er.UID, Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: own, AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "router", Image: "ghcr.io/egressd/egressd:latest", Command: []string{"/usr/local/bin/egressd", "router-pod"},
					SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65534),
						AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}}}
	}
	_, err = agent.CoreV1().Pods(ns).Create(ctx, routerPod(), metav1.CreateOptions{})
	refused("creating a router pod", err, byRBAC)
	refused("deleting a workload pod", agent.CoreV1().Pods(ns).Delete(ctx, workload.Name, metav1.DeleteOptions{}), byRBAC)
	_, err = agent.CoordinationV1().Leases(ns).Get(ctx, leaseName, metav1.GetOptions{})
	refused("reading the Lease", err, byRBAC)
	taken := lease.DeepCopy()
	taken.Spec.HolderIdentity = ptr.To(own)
	_, err = agent.CoordinationV1().Leases(ns).Update(ctx, taken, metav1.UpdateOptions{})
	refused("taking the Lease", err, byRBAC)
	_, err = agent.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "egressd-other"}}, metav1.CreateOptions{})
	refused("creating a Lease", err, byRBAC)
	_, err = agentOVN.K8sOVNV1().EgressIPs().Patch(ctx, eipName, types.MergePatchType,
		[]byte(`{"status":{"items":[{"node":"`+own+`","egressIP":"192.0.2.77"}]}}`), metav1.PatchOptions{FieldManager: "egressd-leader"})
	refused("assigning an EgressIP (status.items)", err, byRBAC)
	_, err = agentOVN.CloudNetworkV1().CloudPrivateIPConfigs().Create(ctx, &cloudv1.CloudPrivateIPConfig{ObjectMeta: metav1.ObjectMeta{Name: "192.0.2.77"},
		Spec: cloudv1.CloudPrivateIPConfigSpec{Node: own}}, metav1.CreateOptions{})
	refused("requesting an address from the cloud", err, byRBAC)
	refused("labelling another Node", patchNode(agent, other, `{"metadata":{"labels":{"egress-service.k8s.ovn.org/app-web":""}}}`), byPolicy)
	refused("labelling its own Node as an EgressService host", patchNode(agent, own, `{"metadata":{"labels":{"egress-service.k8s.ovn.org/app-web":""}}}`), byPolicy)
	refused("making its own Node egress-assignable", patchNode(agent, own, `{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":""}}}`), byPolicy)
	// The status of an EgressFirewall is the controller's alone, written from the reports: the
	// agent may write none of it, under no field manager.
	refused("writing the EgressFirewall's verdict", applyFW(agentOVN, "egressd-leader",
		ovnac.EgressFirewallStatus().WithStatus("EgressFirewall Rules applied").WithMessages(otherFailure)), byRBAC)
	refused("removing another node's failure", applyFW(agentOVN, "egressd-leader", ovnac.EgressFirewallStatus().WithStatus(verdict)), byRBAC)
	refused("turning another node's failure into a success", applyFW(agentOVN, "egressd-leader",
		ovnac.EgressFirewallStatus().WithStatus("EgressFirewall Rules applied").WithMessages(other+": EgressFirewall Rules applied")), byRBAC)
	refused("writing an entry of its own node, as the previous release did", applyFW(agentOVN, own,
		ovnac.EgressFirewallStatus().WithMessages(own+": EgressFirewall Rules applied")), byRBAC)
	// Nor through the reports: another node's report (its failure turned into a success) is not
	// the agent's to write, nor to delete.
	refusedByPolicy("turning another node's reported failure into a success", applyReport(agentOVN, own, report(other, nodes[other], "")), reportNotOwn)
	refusedByPolicy("turning another node's reported failure into a success under its manager", applyReport(agentOVN, other, report(other, nodes[other], "")), reportNotOwn)
	refusedByPolicy("owning its report by another Node", applyReport(agentOVN, own, report(own, nodes[other], "")), reportOwnerNotOK)
	refused("deleting another node's report", agentOVN.EgressdV1alpha1().NodeReports().Delete(ctx, other, metav1.DeleteOptions{}), byRBAC)

	// Nothing changed.
	if pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 1 || pods.Items[0].Name != workload.Name {
		t.Errorf("pods after the agent's attempts: %v, want the workload alone (%v)", pods, err)
	}
	if l, err := admin.CoordinationV1().Leases(ns).Get(ctx, leaseName, metav1.GetOptions{}); err != nil || ptr.Deref(l.Spec.HolderIdentity, "") != "egressd-controller-0" || l.ResourceVersion != lease.ResourceVersion {
		t.Errorf("the Lease after the agent's attempts: %+v (%v), want unchanged", l, err)
	}
	if _, err := admin.CoordinationV1().Leases(ns).Get(ctx, "egressd-other", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Lease the agent created: %v", err)
	}
	if e, err := adminOVN.K8sOVNV1().EgressIPs().Get(ctx, eipName, metav1.GetOptions{}); err != nil || len(e.Status.Items) != 0 {
		t.Errorf("the EgressIP after the agent's attempts: %+v (%v), want unassigned", e, err)
	}
	if _, err := adminOVN.CloudNetworkV1().CloudPrivateIPConfigs().Get(ctx, "192.0.2.77", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a CloudPrivateIPConfig the agent created: %v", err)
	}
	for _, n := range []string{own, other} {
		node, err := admin.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(node.Labels) != 1 || node.Labels["role"] != "worker" {
			t.Errorf("node %s labels after the agent's attempts: %v, want role=worker alone", n, node.Labels)
		}
	}
	fw, err := adminOVN.K8sOVNV1().EgressFirewalls(ns).Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fw.Status.Status != verdict || len(fw.Status.Messages) != 1 || fw.Status.Messages[0] != otherFailure {
		t.Errorf("the EgressFirewall's status after the agent's attempts: %+v, want %q and %q alone", fw.Status, verdict, otherFailure)
	}
	if r, err := adminOVN.EgressdV1alpha1().NodeReports().Get(ctx, other, metav1.GetOptions{}); err != nil || r.ResourceVersion != otherReport.ResourceVersion ||
		len(r.Objects) != 1 || r.Objects[0].Failure != "boom" {
		t.Errorf("%s's report after the agent's attempts: %+v (%v), want unchanged, its failure kept", other, r, err)
	}
	if _, err := adminOVN.EgressdV1alpha1().NodeReports().Get(ctx, own, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("%s's report owned by another Node: %v, want NotFound", own, err)
	}

	// The controller makes these writes, within bounds.
	const hostLabel = "egress-service.k8s.ovn.org/x-y"
	if err := patchNode(ctrl, other, `{"metadata":{"labels":{"`+hostLabel+`":""}}}`); err != nil {
		t.Errorf("the controller labelling an EgressService host: %v", err)
	}
	if err := patchNode(ctrl, other, `{"metadata":{"labels":{"role":"infra"}}}`); !apierrors.IsInvalid(err) {
		t.Errorf("the controller changing another label: %v, want Invalid", err)
	}
	if err := patchNode(ctrl, other, `{"metadata":{"annotations":{"k8s.ovn.org/host-cidrs":"[\"192.0.2.1/24\"]"}}}`); !apierrors.IsInvalid(err) {
		t.Errorf("the controller writing an annotation: %v, want Invalid", err)
	}
	if node, err := admin.CoreV1().Nodes().Get(ctx, other, metav1.GetOptions{}); err != nil || node.Labels["role"] != "worker" || node.Labels[hostLabel] != "" || len(node.Labels) != 2 || len(node.Annotations) != 0 {
		t.Errorf("node %s after the controller's writes: labels %v, annotations %v (%v), want role=worker and %s", other, node.Labels, node.Annotations, err, hostLabel)
	}
	patchEIP := func(p string) error {
		_, err := ctrlOVN.K8sOVNV1().EgressIPs().Patch(ctx, eipName, types.MergePatchType, []byte(p), metav1.PatchOptions{FieldManager: "egressd-leader"})
		return err
	}
	if err := patchEIP(`{"status":{"items":[{"node":"` + other + `","egressIP":"192.0.2.77"}]}}`); err != nil {
		t.Errorf("the controller assigning the EgressIP: %v", err)
	}
	if err := patchEIP(`{"spec":{"egressIPs":["198.51.100.9"]}}`); !apierrors.IsInvalid(err) {
		t.Errorf("the controller changing the EgressIP's spec: %v, want Invalid", err)
	}
	if e, err := adminOVN.K8sOVNV1().EgressIPs().Get(ctx, eipName, metav1.GetOptions{}); err != nil || len(e.Spec.EgressIPs) != 1 || e.Spec.EgressIPs[0] != "192.0.2.77" ||
		len(e.Status.Items) != 1 || e.Status.Items[0].Node != other {
		t.Errorf("the EgressIP after the controller's writes: %+v (%v), want its spec and assigned to %s", e, err, other)
	}
	made, err := ctrl.CoreV1().Pods(ns).Create(ctx, routerPod(), metav1.CreateOptions{})
	if err != nil {
		t.Errorf("the controller creating a router pod: %v", err)
	} else if err := ctrl.CoreV1().Pods(ns).Delete(ctx, made.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("the controller deleting its router pod: %v", err)
	}
	if err := ctrl.CoreV1().Pods(ns).Delete(ctx, workload.Name, metav1.DeleteOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("the controller deleting a workload pod: %v, want Invalid", err)
	}
	l, err := ctrl.CoordinationV1().Leases(ns).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the controller reading the Lease: %v", err)
	}
	l.Spec.HolderIdentity = ptr.To("egressd-controller-1")
	if _, err := ctrl.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Errorf("the controller taking the Lease: %v", err)
	}
}
