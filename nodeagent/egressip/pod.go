package egressip

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// Serving picks the one EgressIP object whose IPs a pod leaves with when several select it;
// "" when none serves it. As upstream (ovnkube-controller's pod assignment cache):
//   - host-network, unscheduled and completed pods are never served;
//   - an object serves only once it has a status entry (an IP on a node);
//   - the object already serving the pod (current, from the previous decision) keeps it for
//     as long as it still qualifies: the first claim holds, a newer object does not take over;
//   - otherwise a standby takes over; upstream takes an arbitrary one, here the oldest
//     (creation time, then name), so every agent and every run agree.
//
// Each other qualifying object stands by and gets upstream's UndefinedRequest event.
func Serving(pod *corev1.Pod, namespaceLabels map[string]string, eips []*ovnv1.EgressIP, current string) (string, []Event) {
	if pod.Spec.NodeName == "" || pod.Spec.HostNetwork ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return "", nil
	}
	var eligible []*ovnv1.EgressIP
	for _, e := range eips {
		if len(e.Status.Items) > 0 && selects(e, namespaceLabels, pod.Labels) {
			eligible = append(eligible, e)
		}
	}
	if len(eligible) == 0 {
		return "", nil
	}
	slices.SortFunc(eligible, func(x, y *ovnv1.EgressIP) int {
		if c := x.CreationTimestamp.Compare(y.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(x.Name, y.Name)
	})
	serving := eligible[0].Name
	if slices.ContainsFunc(eligible, func(e *ovnv1.EgressIP) bool { return e.Name == current }) {
		serving = current
	}
	var events []Event
	for _, e := range eligible {
		if e.Name != serving {
			events = append(events, standbyEvent(e.Name, pod.Namespace, pod.Name, serving))
		}
	}
	return serving, events
}

// selects: the namespace selector matches the pod's namespace and the pod selector the pod
// (an empty selector matches all). An invalid selector selects nothing.
func selects(e *ovnv1.EgressIP, namespaceLabels, podLabels map[string]string) bool {
	ns, err := metav1.LabelSelectorAsSelector(&e.Spec.NamespaceSelector)
	if err != nil || !ns.Matches(labels.Set(namespaceLabels)) {
		return false
	}
	p, err := metav1.LabelSelectorAsSelector(&e.Spec.PodSelector)
	return err == nil && p.Matches(labels.Set(podLabels))
}
