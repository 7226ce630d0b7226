package e2e

import (
	"context"
	"fmt"
	"path/filepath"
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
// not labels, not without the claim; and change only EgressIPs' status. Others (an admin) are
// not concerned.
func TestDeployNodePolicy(t *testing.T) {
	cp := controlplane.Shared(t)
	admin := cp.Client(t)
	ctx := context.Background()
	ns, user := agentUnderPolicies(t, cp, "node-policy.yaml")

	own, other := ns+"-a", ns+"-b"
	for _, n := range []string{own, other} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"role": "worker"},
			Annotations: map[string]string{"example.com/keep": "1"}}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	agentOn := func(node string) kubernetes.Interface {
		c, err := kube.Impersonate(cp.Config, user, ns, node)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
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
	// The host of an EgressService labels itself (upstream's label), and unlabels itself.
	if err := patch(agent, own, `{"metadata":{"labels":{"egress-service.k8s.ovn.org/app-web":""}}}`); err != nil {
		t.Errorf("the agent labeling its own Node as an EgressService host: %v", err)
	}
	if err := patch(agent, own, `{"metadata":{"labels":{"egress-service.k8s.ovn.org/app-web":null}}}`); err != nil {
		t.Errorf("the agent removing its own EgressService host label: %v", err)
	}
	for _, d := range []struct{ what, who, node, patch, want string }{
		{"another annotation", own, own, `{"metadata":{"annotations":{"example.com/other":"x"}}}`, "only its own annotations"},
		{"changing an annotation not its own", own, own, `{"metadata":{"annotations":{"example.com/keep":"2"}}}`, "only its own annotations"},
		{"removing an annotation not its own", own, own, `{"metadata":{"annotations":{"example.com/keep":null}}}`, "only its own annotations"},
		{"a label", own, own, `{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":""}}}`, "labels"},
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

	// EgressIPs: the agent (the leader) updates their status, and nothing else.
	gvr := schema.GroupVersionResource{Group: "k8s.ovn.org", Version: "v1", Resource: "egressips"}
	adminDyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	agentDyn, err := dynamic.NewForConfig(kube.ImpersonateConfig(cp.Config, user, ns, own))
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
		_, err := agentDyn.Resource(gvr).Patch(ctx, name, types.MergePatchType, []byte(p), metav1.PatchOptions{FieldManager: "egressd-leader"})
		return err
	}
	const denied = "may change only an EgressIP's status"
	poll.Eventually(t, "the agent is denied changing an EgressIP's spec", 20*time.Second, func() error {
		if err := patchEIP(`{"spec":{"egressIPs":["198.51.100.9"]}}`); err == nil || !strings.Contains(err.Error(), denied) {
			return fmt.Errorf("got %v", err)
		}
		return nil
	})
	// The leader writes addresses in their canonical form, whatever the spec's.
	if err := patchEIP(`{"status":{"items":[{"node":"` + own + `","egressIP":"192.0.2.77"},{"node":"` + own + `","egressIP":"2001:db8::77"}]}}`); err != nil {
		t.Errorf("the agent assigning the EgressIP (status.items): %v", err)
	}
	// The previous release's leader updates the object it read, its absent podSelector as {}.
	cur, err := adminDyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedMap(cur.Object, map[string]any{}, "spec", "podSelector")
	_ = unstructured.SetNestedSlice(cur.Object, []any{}, "status", "items")
	if _, err := agentDyn.Resource(gvr).Update(ctx, cur, metav1.UpdateOptions{FieldManager: "egressd-leader"}); err != nil {
		t.Errorf("the previous release's leader updating the EgressIP's status (podSelector {}): %v", err)
	}
	if err := patchEIP(`{"status":{"items":[{"node":"` + other + `","egressIP":"198.51.100.9"}]}}`); err == nil || !strings.Contains(err.Error(), "only the addresses an EgressIP requests") {
		t.Errorf("the agent assigning an address the EgressIP does not request: %v, want denied", err)
	}
	for what, p := range map[string]string{
		"an owner":               `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":"00000000-0000-0000-0000-000000000001"}]}}`,
		"a finalizer":            `{"metadata":{"finalizers":["example.com/hold"]}}`,
		"its namespace selector": `{"spec":{"namespaceSelector":{"matchLabels":{"team":"b"}}}}`,
		"its pod selector":       `{"spec":{"podSelector":{"matchLabels":{"x":"y"}}}}`,
		"a label":                `{"metadata":{"labels":{"x":"y"}}}`,
	} {
		if err := patchEIP(p); err == nil || !strings.Contains(err.Error(), denied) {
			t.Errorf("the agent changing an EgressIP's %s: %v, want denied (%s)", what, err, denied)
		}
	}
}

// agentUnderPolicies makes a namespace whose ServiceAccount egressd has the agent's RBAC
// (deploy/rbac.yaml) and is under the policies of deploy/<file> as deployed (under names of
// their own), all undone when the test ends; it returns the namespace and the agent's user.
func agentUnderPolicies(t *testing.T, cp *controlplane.ControlPlane, file string) (ns, user string) {
	t.Helper()
	ns = cp.Namespace(t)
	user = "system:serviceaccount:" + ns + ":egressd"
	cleanup, err := kube.GrantAgentRBAC(context.Background(), cp.Client(t), "../../deploy/rbac.yaml", ns, user)
	if cleanup != nil {
		t.Cleanup(cleanup)
	}
	if err != nil {
		t.Fatal(err)
	}
	uninstall, err := kube.InstallAgentPolicies(context.Background(), cp.Config, filepath.Join(deployDir, file), user, ns)
	if uninstall != nil {
		t.Cleanup(uninstall)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ns, user
}
