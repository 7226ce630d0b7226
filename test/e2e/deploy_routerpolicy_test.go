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
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
	"github.com/egressd/egressd/test/poll"
)

// TestDeployRouterPodPolicy: with deploy/router-pod-policy.yaml installed, an agent (its
// ServiceAccount and deploy/rbac.yaml) may create the router pods the leader makes
// (nodeagent/egressrouter/pod.go) and nothing more: not a pod of another app, not one with a
// privileged container, the host's network, a host port, or seccomp or AppArmor unconfined.
func TestDeployRouterPodPolicy(t *testing.T) {
	cp := controlplane.Shared(t)
	ns := cp.Namespace(t)
	admin := cp.Client(t)
	ctx := context.Background()
	user := "system:serviceaccount:" + ns + ":egressd"
	cleanup, err := kube.GrantAgentRBAC(ctx, admin, "../../deploy/rbac.yaml", ns, user)
	if cleanup != nil {
		t.Cleanup(cleanup)
	}
	if err != nil {
		t.Fatal(err)
	}
	uninstall, err := kube.InstallAgentPolicies(ctx, cp.Config, filepath.Join(deployDir, "router-pod-policy.yaml"), user, ns)
	if uninstall != nil {
		t.Cleanup(uninstall)
	}
	if err != nil {
		t.Fatal(err)
	}
	agent, err := kube.Impersonate(cp.Config, user, ns, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	// The router pod as the leader makes it.
	router := func(change func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "router-", Namespace: ns, Labels: map[string]string{"app": "egress-router-cni"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "network.operator.openshift.io/v1", Kind: "EgressRouter", Name: "r", UID: "0b1c", Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: "node-a", AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "router", Image: "ghcr.io/egressd/egressd:latest", Command: []string{"/usr/local/bin/egressd", "router-pod"},
					SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65534), AllowPrivilegeEscalation: ptr.To(false),
						ReadOnlyRootFilesystem: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}}},
		}
		if change != nil {
			change(p)
		}
		return p
	}
	create := func(c kubernetes.Interface, p *corev1.Pod) error {
		_, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	const denied = "an egressd agent's router pod runs unprivileged"
	poll.Eventually(t, "the policy denies a router pod with a host port", 20*time.Second, func() error {
		err := create(agent, router(func(p *corev1.Pod) { p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}} }))
		if err == nil || !strings.Contains(err.Error(), denied) {
			return fmt.Errorf("%v", err)
		}
		return nil
	})
	if err := create(agent, router(nil)); err != nil {
		t.Errorf("the agent creating the leader's router pod: %v", err)
	}
	unconfined := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	for _, d := range []struct {
		what   string
		change func(*corev1.Pod)
		want   string
	}{
		{"a pod of another app", func(p *corev1.Pod) { p.Labels["app"] = "web" }, "only EgressRouter pods"},
		{"a privileged container", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true)
			p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
		}, denied},
		{"the host's network", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, denied},
		{"a container unconfined by seccomp", func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.SeccompProfile = unconfined }, denied},
		{"a pod unconfined by seccomp", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.SeccompProfile = nil
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: unconfined}
		}, denied},
		{"a container unconfined by AppArmor", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}, denied},
	} {
		if err := create(agent, router(d.change)); err == nil || !strings.Contains(err.Error(), d.want) {
			t.Errorf("the agent creating %s: %v, want denied (%s)", d.what, err, d.want)
		}
	}
	if err := create(admin, router(func(p *corev1.Pod) { p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}} })); err != nil {
		t.Errorf("an admin creating a pod with a host port: %v", err)
	}
}
