package watchers

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Pod is a pod as the caches hold it: what egressd's features read of a corev1.Pod, under the
// same field names. A corev1.Pod's struct alone is 1,240 bytes, most of them the spec and
// status fields no feature reads; this one is about 330. An egress node caches the 10,000 pods
// its EgressIPs serve.
type Pod struct {
	metav1.ObjectMeta
	Spec   PodSpec
	Status PodStatus
}

// PodSpec is what the features read of a pod's spec.
type PodSpec struct {
	NodeName    string
	HostNetwork bool
}

// PodStatus is what the features read of a pod's status: its phase, addresses and readiness
// (the only condition kept).
type PodStatus struct {
	Phase      corev1.PodPhase
	PodIP      string
	PodIPs     []corev1.PodIP
	Conditions []corev1.PodCondition
}

// CachedPod is p as the caches hold it (trimmed as transform trims). p is not modified.
func CachedPod(p *corev1.Pod) *Pod { return trimPod(p.DeepCopy()) }

// Ready says whether the pod's Ready condition is True.
func (p *Pod) Ready() bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// GetObjectKind and DeepCopyObject make a Pod a runtime.Object, as the listers need.
func (p *Pod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (p *Pod) DeepCopyObject() runtime.Object { return p.DeepCopy() }

// DeepCopy is a copy of p that shares nothing with it.
func (p *Pod) DeepCopy() *Pod {
	if p == nil {
		return nil
	}
	out := &Pod{Spec: p.Spec, Status: p.Status}
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.PodIPs = slices.Clone(p.Status.PodIPs)
	out.Status.Conditions = slices.Clone(p.Status.Conditions)
	return out
}

// String is the whole pod, not only its ObjectMeta (whose String it would promote).
func (p *Pod) String() string {
	return fmt.Sprintf("Pod %s/%s (uid %s, labels %v, annotations %v) node %q hostNetwork %t: %s, addresses %v, conditions %v",
		p.Namespace, p.Name, p.UID, p.Labels, p.Annotations, p.Spec.NodeName, p.Spec.HostNetwork, p.Status.Phase, p.Status.PodIPs, p.Status.Conditions)
}
