package egressrouter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/egressd/egressd/api/generated/clientset/versioned"
	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
	"github.com/egressd/egressd/test/poll"
)

func TestMain(m *testing.M) { controlplane.Main(m) }

// TestRouterPodAdmission: with deploy/controller-rbac.yaml and the admission policy of
// deploy/router-pod-policy.yaml, the controller (its ServiceAccount, impersonated) may create the
// router pod newPod makes and delete it, and no other pod: not one that is not an EgressRouter's, nor
// a router pod with more privileges (host namespaces or ports, capabilities, volumes, seccomp or
// AppArmor unconfined); the API server's own denial says why.
func TestRouterPodAdmission(t *testing.T) {
	cp := controlplane.Shared(t)
	ns := cp.Namespace(t)
	ctx := context.Background()
	admin := cp.Client(t)
	user := "system:serviceaccount:" + ns + ":egressd-controller"
	revoke, err := kube.GrantAgentRBAC(ctx, admin, "../../deploy/controller-rbac.yaml", ns, user)
	if revoke != nil {
		t.Cleanup(revoke)
	}
	if err != nil {
		t.Fatal(err)
	}
	uninstall, err := kube.InstallPolicies(ctx, cp.Config, "../../deploy/router-pod-policy.yaml", map[string]string{kube.DeployedController: user}, ns)
	if uninstall != nil {
		t.Cleanup(uninstall)
	}
	if err != nil {
		t.Fatal(err)
	}
	controller, err := kube.Impersonate(cp.Config, user, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	ovn, err := versioned.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	er, err := ovn.NetworkOperatorV1().EgressRouters(ns).Create(ctx, &netopv1.EgressRouter{
		ObjectMeta: metav1.ObjectMeta{Name: "router"},
		Spec: netopv1.EgressRouterSpec{Mode: netopv1.EgressRouterModeRedirect,
			NetworkInterface: netopv1.EgressRouterInterface{Macvlan: netopv1.MacvlanConfig{Mode: netopv1.MacvlanModeBridge}},
			Addresses:        []netopv1.EgressRouterAddress{{IP: "192.0.2.99/24", Gateway: "192.0.2.1"}},
			Redirect:         &netopv1.RedirectConfig{FallbackIP: "203.0.113.10"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	create := func(c interface {
		Create(context.Context, *corev1.Pod, metav1.CreateOptions) (*corev1.Pod, error)
	}, p *corev1.Pod) (*corev1.Pod, error) {
		return c.Create(ctx, p, metav1.CreateOptions{})
	}

	// What the leader creates passes, once the API server has compiled the policy (and the
	// namespace's default ServiceAccount, which pod admission looks up, exists).
	privileged := newPod(er, ns+"-node", DefaultImage)
	sc := privileged.Spec.Containers[0].SecurityContext
	sc.Privileged, sc.AllowPrivilegeEscalation = ptr.To(true), nil
	poll.Eventually(t, "a privileged router pod denied", 30*time.Second, func() error {
		if _, err := create(controller.CoreV1().Pods(ns), privileged); err == nil || !strings.Contains(err.Error(), "runs unprivileged") {
			return fmt.Errorf("created: %v", err)
		}
		return nil
	})
	var made *corev1.Pod
	poll.Eventually(t, "the controller creates the router pod", 30*time.Second, func() error {
		made, err = create(controller.CoreV1().Pods(ns), newPod(er, ns+"-node", DefaultImage))
		return err
	})

	for _, d := range []struct {
		what   string
		change func(*corev1.Pod)
		want   string
	}{
		{"without the router label", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "web"} }, "only EgressRouter pods"},
		{"owned by no EgressRouter", func(p *corev1.Pod) { p.OwnerReferences = nil }, "only EgressRouter pods"},
		{"on the host network", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "runs unprivileged"},
		{"with a ServiceAccount token", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil }, "runs unprivileged"},
		{"with an added capability", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}, "runs unprivileged"},
		{"as root", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.RunAsNonRoot, p.Spec.Containers[0].SecurityContext.RunAsUser = nil, ptr.To[int64](0)
		}, "runs unprivileged"},
		{"mounting the host's root", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "root", MountPath: "/host"}}
		}, "runs unprivileged"},
		{"with an init container", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: DefaultImage}}
		}, "runs unprivileged"},
		{"with a host port", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}
		}, "runs unprivileged"},
		{"unconfined by seccomp", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}, "runs unprivileged"},
		{"unconfined by seccomp for the whole pod", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.SeccompProfile = nil
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
		}, "runs unprivileged"},
		{"unconfined by AppArmor", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}, "runs unprivileged"},
	} {
		p := newPod(er, ns+"-node", DefaultImage)
		d.change(p)
		if _, err := create(controller.CoreV1().Pods(ns), p); err == nil || !strings.Contains(err.Error(), d.want) {
			t.Errorf("the controller creating a router pod %s: %v, want denied (%s)", d.what, err, d.want)
		}
	}

	// Deletion: the router pod, not a workload.
	workload, err := create(admin.CoreV1().Pods(ns), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: ns + "-node", HostNetwork: true, Containers: []corev1.Container{{Name: "web", Image: DefaultImage}}}})
	if err != nil {
		t.Fatalf("an admin creating a host-network pod: %v", err)
	}
	if err := controller.CoreV1().Pods(ns).Delete(ctx, workload.Name, metav1.DeleteOptions{}); err == nil || !strings.Contains(err.Error(), "only EgressRouter pods") {
		t.Errorf("the controller deleting a workload pod: %v, want denied", err)
	}
	if err := controller.CoreV1().Pods(ns).Delete(ctx, made.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("the controller deleting the router pod it made: %v", err)
	}
}
