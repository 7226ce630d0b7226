package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
	"github.com/egressd/egressd/test/poll"
)

// TestDeployNodePolicy: with deploy/node-policy.yaml installed, an agent (its ServiceAccount
// with the node-name claim of its pod-bound token, and deploy/rbac.yaml) may publish its
// annotations on its own Node, and nothing else: not on another Node, not other annotations,
// no label at all, not without the claim. The controller (deploy/controller-rbac.yaml) may set
// and remove the EgressService hosts' labels (egress-service.k8s.ovn.org/) on any Node and
// nothing else there, and change only EgressIPs' status. Others (an admin) are not concerned.
func TestDeployNodePolicy(t *testing.T) {
	cp := controlplane.Shared(t)
	admin := cp.Client(t)
	ctx := context.Background()
	u := underPolicies(t, cp, "node-policy.yaml")
	ns := u.ns

	own, other := ns+"-a", ns+"-b"
	for _, n := range []string{own, other} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"role": "worker"},
			Annotations: map[string]string{"example.com/keep": "1"}}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	as := func(user, node string) kubernetes.Interface {
		c, err := kube.Impersonate(cp.Config, user, ns, node)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	agentOn := func(node string) kubernetes.Interface { return as(u.agent, node) }
	patch := func(c kubernetes.Interface, node, p string) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(p), metav1.PatchOptions{FieldManager: "egressd"})
		return err
	}
	// What the agent patches (nodeagent/status/nodeannotations.go).
	publish := `{"metadata":{"annotations":{"k8s.ovn.org/host-cidrs":"[\"172.18.0.2/16\"]","k8s.ovn.org/node-primary-ifaddr":"{\"ipv4\":\"172.18.0.2/16\"}"}}}`
	agent := agentOn(own)

	// The policy takes effect once the API server has compiled it.
	poll.Eventually(t, "the agent of "+own+" is denied patching "+other, 20*time.Second, func() error {
		err := patch(agent, other, publish)
		if err == nil {
			return fmt.Errorf("allowed")
		}
		if !strings.Contains(err.Error(), "only the Node its pod runs on") {
			return err
		}
		return nil
	})
	if err := patch(agent, own, publish); err != nil {
		t.Errorf("the agent publishing its annotations on its own Node: %v", err)
	}
	if err := patch(agent, own, `{"metadata":{"annotations":{"k8s.ovn.org/host-cidrs":null}}}`); err != nil {
		t.Errorf("the agent removing its own annotation: %v", err)
	}
	for _, d := range []struct{ what, who, node, patch, want string }{
		{"another annotation", own, own, `{"metadata":{"annotations":{"example.com/other":"x"}}}`, "only its own annotations"},
		{"changing an annotation not its own", own, own, `{"metadata":{"annotations":{"example.com/keep":"2"}}}`, "only its own annotations"},
		{"removing an annotation not its own", own, own, `{"metadata":{"annotations":{"example.com/keep":null}}}`, "only its own annotations"},
		{"a label", own, own, `{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":""}}}`, "labels"},
		{"removing a label", own, own, `{"metadata":{"labels":{"role":null}}}`, "labels"},
		// The EgressService host's label is the controller's now.
		{"its own EgressService label", own, own, `{"metadata":{"labels":{"egress-service.k8s.ovn.org/app-web":""}}}`, "labels"},
		{"the spec", own, own, `{"spec":{"unschedulable":true}}`, "labels"},
		{"another node's EgressService label", own, other, `{"metadata":{"labels":{"egress-service.k8s.ovn.org/app-web":""}}}`, "only the Node its pod runs on"},
		{"without the node claim", "", own, publish, "only the Node its pod runs on"},
	} {
		err := patch(agentOn(d.who), d.node, d.patch)
		if err == nil || !strings.Contains(err.Error(), d.want) {
			t.Errorf("the agent patching %s (%s): %v, want denied (%s)", d.node, d.what, err, d.want)
		}
	}
	if err := patch(admin, other, `{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":""}}}`); err != nil {
		t.Errorf("an admin labeling a node: %v", err)
	}

	// The controller moves an EgressService's host: it labels the new host and unlabels the old
	// one (nodeagent/egressservice), on any Node, with or without a node-name claim (its pod's
	// node is none of its business).
	ctrl := as(u.controller, "")
	const hostLabel = "egress-service.k8s.ovn.org/app-web"
	// Each attempt a change of its own: one let through before the policy takes effect would
	// make the same patch again a no-op, which the policy (old against new) lets through.
	try := 0
	poll.Eventually(t, "the controller is denied another label", 20*time.Second, func() error {
		try++
		if err := patch(ctrl, own, fmt.Sprintf(`{"metadata":{"labels":{"role":"infra-%d"}}}`, try)); err == nil || !strings.Contains(err.Error(), "only a Node's egress-service.k8s.ovn.org/ labels") {
			return fmt.Errorf("got %v", err)
		}
		return nil
	})
	for _, step := range []struct{ what, node, patch string }{
		{"labelling the host", own, `{"metadata":{"labels":{"` + hostLabel + `":""}}}`},
		{"labelling the new host", other, `{"metadata":{"labels":{"` + hostLabel + `":""}}}`},
		{"unlabelling the old host", own, `{"metadata":{"labels":{"` + hostLabel + `":null}}}`},
	} {
		if err := patch(ctrl, step.node, step.patch); err != nil {
			t.Errorf("the controller %s %s: %v", step.what, step.node, err)
		}
	}
	if err := patch(as(u.controller, own), own, `{"metadata":{"labels":{"`+hostLabel+`":""}}}`); err != nil {
		t.Errorf("the controller, with a node-name claim, labelling a host: %v", err)
	}
	// (Each a change: a patch that changes nothing is no write to refuse.)
	for _, d := range []struct{ what, patch, want string }{
		{"another label", `{"metadata":{"labels":{"example.com/other":"x"}}}`, "only a Node's egress-service.k8s.ovn.org/ labels"},
		{"changing another label", `{"metadata":{"labels":{"role":"infra"}}}`, "only a Node's egress-service.k8s.ovn.org/ labels"},
		{"removing another label", `{"metadata":{"labels":{"role":null}}}`, "only a Node's egress-service.k8s.ovn.org/ labels"},
		{"an annotation", `{"metadata":{"annotations":{"example.com/keep":"2"}}}`, "annotations or spec"},
		{"the agent's annotation", `{"metadata":{"annotations":{"k8s.ovn.org/node-primary-ifaddr":"{\"ipv4\":\"192.0.2.9/24\"}"}}}`, "annotations or spec"},
		{"the spec", `{"spec":{"unschedulable":true}}`, "annotations or spec"},
		{"a taint", `{"spec":{"taints":[{"key":"example.com/x","effect":"NoSchedule"}]}}`, "annotations or spec"},
	} {
		err := patch(ctrl, other, d.patch)
		if err == nil || !strings.Contains(err.Error(), d.want) {
			t.Errorf("the controller changing %s of %s: %v, want denied (%s)", d.what, other, err, d.want)
		}
	}
	got, err := admin.CoreV1().Nodes().Get(ctx, other, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["role"] != "worker" || got.Labels["example.com/other"] != "" || got.Annotations["example.com/keep"] != "1" ||
		strings.Contains(got.Annotations["k8s.ovn.org/node-primary-ifaddr"], "192.0.2.9") || got.Spec.Unschedulable ||
		slices.ContainsFunc(got.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "example.com/x" }) {
		t.Errorf("node %s changed by denied patches: labels %v, annotations %v, spec %+v", other, got.Labels, got.Annotations, got.Spec)
	}

	// EgressIPs: the controller (its leader) patches their status and upstream's mark, and
	// nothing else.
	gvr := schema.GroupVersionResource{Group: "k8s.ovn.org", Version: "v1", Resource: "egressips"}
	adminDyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctrlDyn, err := dynamic.NewForConfig(kube.ImpersonateConfig(cp.Config, u.controller, ns, ""))
	if err != nil {
		t.Fatal(err)
	}
	name := "eip-" + ns
	eip := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "k8s.ovn.org/v1", "kind": "EgressIP",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"egressIPs": []any{"192.0.2.77", "2001:DB8::77"}, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"team": "a"}}}}}
	if _, err := adminDyn.Resource(gvr).Create(ctx, eip, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adminDyn.Resource(gvr).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	// As the leader writes it (nodeagent/egressip/controller.go): a merge patch.
	patchEIP := func(p string) error {
		_, err := ctrlDyn.Resource(gvr).Patch(ctx, name, types.MergePatchType, []byte(p), metav1.PatchOptions{FieldManager: "egressd-leader"})
		return err
	}
	const denied = "may change only an EgressIP's status"
	// A policy on a custom resource takes effect once the API server has its schema: under
	// CI's load that took more than 20 s once. (Each attempt a change, as above.)
	try = 0
	poll.Eventually(t, "the controller is denied changing an EgressIP's spec", 60*time.Second, func() error {
		try++
		if err := patchEIP(fmt.Sprintf(`{"spec":{"egressIPs":["198.51.100.%d"]}}`, 10+try%200)); err == nil || !strings.Contains(err.Error(), denied) {
			return fmt.Errorf("got %v", err)
		}
		return nil
	})
	// (What an attempt let through before then, undone.)
	if _, err := adminDyn.Resource(gvr).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"egressIPs":["192.0.2.77","2001:DB8::77"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The leader writes addresses in their canonical form, whatever the spec's.
	if err := patchEIP(`{"status":{"items":[{"node":"` + own + `","egressIP":"192.0.2.77"},{"node":"` + own + `","egressIP":"2001:db8::77"}]}}`); err != nil {
		t.Errorf("the controller assigning the EgressIP (status.items): %v", err)
	}
	// An absent podSelector written as {} selects the same pods (the previous release's
	// leader wrote back what it read so): let through.
	if err := patchEIP(`{"spec":{"podSelector":{}},"status":{"items":[]}}`); err != nil {
		t.Errorf("the controller writing an absent podSelector as {}: %v", err)
	}
	if err := patchEIP(`{"status":{"items":[{"node":"` + other + `","egressIP":"198.51.100.9"}]}}`); err == nil || !strings.Contains(err.Error(), "only the addresses an EgressIP requests") {
		t.Errorf("the controller assigning an address the EgressIP does not request: %v, want denied", err)
	}
	// Upstream's mark, as the leader writes it (nodeagent/egressip/mark.go): set, and changed
	// from an invalid one, within upstream's range; never removed, never out of the range.
	for _, m := range []string{"60000", "abc"} {
		if err := patchEIP(`{"metadata":{"annotations":{"k8s.ovn.org/egressip-mark":"` + m + `"}}}`); err == nil || !strings.Contains(err.Error(), "only to a mark of upstream's range") {
			t.Errorf("the controller setting mark %s: %v, want denied", m, err)
		}
	}
	if err := patchEIP(`{"metadata":{"annotations":{"k8s.ovn.org/egressip-mark":"50007"}}}`); err != nil {
		t.Errorf("the controller setting the EgressIP's mark: %v", err)
	}
	for what, p := range map[string]string{
		"its mark (removal)":     `{"metadata":{"annotations":{"k8s.ovn.org/egressip-mark":null}}}`,
		"an annotation":          `{"metadata":{"annotations":{"example.com/x":"y"}}}`,
		"an owner":               `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":"00000000-0000-0000-0000-000000000001"}]}}`,
		"a finalizer":            `{"metadata":{"finalizers":["example.com/hold"]}}`,
		"its namespace selector": `{"spec":{"namespaceSelector":{"matchLabels":{"team":"b"}}}}`,
		"its pod selector":       `{"spec":{"podSelector":{"matchLabels":{"x":"y"}}}}`,
		"a label":                `{"metadata":{"labels":{"x":"y"}}}`,
	} {
		if err := patchEIP(p); err == nil || !strings.Contains(err.Error(), denied) {
			t.Errorf("the controller changing an EgressIP's %s: %v, want denied (%s)", what, err, denied)
		}
	}
}

// egressdUsers are the users of the agent and the controller standing, in the test namespace
// ns, for the ServiceAccounts egressd and egressd-controller of the namespace egressd.
type egressdUsers struct{ ns, agent, controller string }

// underPolicies makes a namespace whose ServiceAccounts egressd and egressd-controller have
// the agent's and the controller's RBAC (deploy/rbac.yaml, deploy/controller-rbac.yaml with its
// Role in the namespace) and are under the policies of deploy/<files> as deployed (under names
// of their own), all undone when the test ends.
func underPolicies(t *testing.T, cp *controlplane.ControlPlane, files ...string) egressdUsers {
	t.Helper()
	ns := cp.Namespace(t)
	u := egressdUsers{ns: ns, agent: "system:serviceaccount:" + ns + ":egressd", controller: "system:serviceaccount:" + ns + ":egressd-controller"}
	for rbac, user := range map[string]string{"rbac.yaml": u.agent, "controller-rbac.yaml": u.controller} {
		cleanup, err := kube.GrantAgentRBAC(context.Background(), cp.Client(t), filepath.Join(deployDir, rbac), ns, user)
		if cleanup != nil {
			t.Cleanup(cleanup)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	users := map[string]string{kube.DeployedAgent: u.agent, kube.DeployedController: u.controller}
	for _, file := range files {
		uninstall, err := kube.InstallPolicies(context.Background(), cp.Config, filepath.Join(deployDir, file), users, ns)
		if uninstall != nil {
			t.Cleanup(uninstall)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return u
}
