package egressip

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/watchers"
)

// serving picks the one EgressIP object whose IPs a pod leaves with when several select it;
// "" when none serves it. selecting are the assigned objects whose selectors match the pod
// (selectedPods). As upstream (ovnkube-controller's pod assignment cache):
//   - host-network, unscheduled and completed pods are never served;
//   - the object already serving the pod (current, from the previous decision) keeps it for
//     as long as it still qualifies: the first claim holds, a newer object does not take over;
//   - otherwise a standby takes over; upstream takes an arbitrary one, here the oldest
//     (creation time, then name), so every agent and every run agree.
//
// Each other qualifying object stands by and gets upstream's UndefinedRequest event.
func serving(pod *watchers.Pod, selecting []*ovnv1.EgressIP, current string) (string, []Event) {
	if pod.Spec.NodeName == "" || pod.Spec.HostNetwork ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || len(selecting) == 0 {
		return "", nil
	}
	eligible := slices.SortedFunc(slices.Values(selecting), func(x, y *ovnv1.EgressIP) int {
		if c := x.CreationTimestamp.Compare(y.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(x.Name, y.Name)
	})
	name := eligible[0].Name
	if slices.ContainsFunc(eligible, func(e *ovnv1.EgressIP) bool { return e.Name == current }) {
		name = current
	}
	var events []Event
	for _, e := range eligible {
		if e.Name != name {
			events = append(events, standbyEvent(e.Name, pod.Namespace, pod.Name, name))
		}
	}
	return name, events
}
