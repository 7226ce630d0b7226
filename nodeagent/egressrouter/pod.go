package egressrouter

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
	"github.com/egressd/egressd/dataplane/router"
)

// Labels and annotations of router pods.
const (
	// AppLabel is upstream's label of router pods: users' Services select it.
	AppLabel = "app"
	AppValue = "egress-router-cni"
	// specHashAnnotation is the specHash of the spec the pod was made for.
	specHashAnnotation = "egressd.io/egress-router-spec"
)

// DefaultImage is egressd's own image, which runs the router pod (egressd router-pod).
const DefaultImage = "ghcr.io/egressd/egressd:latest"

// newPod is the router pod of er on node: upstream's label, owned by er, bound to the node by the
// leader (no scheduler involved: the leader knows which nodes are on the network). Its container
// holds the network namespace the CNI plugin configured and reports the macvlan's health; it
// runs as nobody, without capabilities or a service account token. It tolerates every taint:
// the leader, not taint eviction, moves it when its node fails.
func newPod(er *netopv1.EgressRouter, node, image string) *corev1.Pod {
	check := []string{"/usr/local/bin/egressd", "router-pod", "--check"}
	for _, a := range er.Spec.Addresses {
		check = append(check, "--address", a.IP)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: strings.TrimSuffix(er.Name, "-") + "-",
			Namespace:    er.Namespace,
			Labels:       map[string]string{AppLabel: AppValue},
			Annotations:  map[string]string{specHashAnnotation: specHash(&er.Spec)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: netopv1.SchemeGroupVersion.String(), Kind: "EgressRouter",
				Name: er.Name, UID: er.UID, Controller: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			// Only the taints of a failing node: the controller moves a router off a node
			// that stopped answering itself (2 s), before the taint manager's eviction would.
			// Other taints an admin sets keep routers away, as they keep other pods (place.go).
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			},
			Containers: []corev1.Container{{
				Name:    "router",
				Image:   image,
				Command: []string{"/usr/local/bin/egressd", "router-pod"},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: check}},
					PeriodSeconds: 10,
				},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot:             ptr.To(true),
					RunAsUser:                ptr.To[int64](65534),
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
		},
	}
}

// ownerOf returns the name and UID of the EgressRouter controlling pod, if any.
func ownerOf(pod metav1.Object) (metav1.OwnerReference, bool) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "EgressRouter" || ref.APIVersion != netopv1.SchemeGroupVersion.String() {
		return metav1.OwnerReference{}, false
	}
	return *ref, pod.GetLabels()[AppLabel] == AppValue
}

// served describes a configured router for the Available message.
func served(c *router.Config, master string) string {
	var addrs []string
	for _, a := range c.Addresses {
		addrs = append(addrs, a.String())
	}
	s := "serves " + strings.Join(addrs, ", ") + " on a " + string(c.Mode) + " macvlan on " + master
	switch {
	case len(c.Rules) == 0 && c.Fallback.IsValid():
		s += "; everything goes to " + c.Fallback.String()
	case c.Fallback.IsValid():
		s += "; other ports go to " + c.Fallback.String()
	default:
		s += "; other ports are rejected"
	}
	return s
}
