package nodeagent

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/watchers"
)

// compileLocalPods lists the pods of this node that egressd classifies: running on the pod
// network (not hostNetwork), not finished, with addresses.
func compileLocalPods(in *input, into *dataplane.State) error {
	objs, err := in.snap.PodIndex.ByIndex(watchers.PodsByNode, in.node)
	if err != nil {
		return fmt.Errorf("pods of node %s: %w", in.node, err)
	}
	for _, o := range objs {
		pod := o.(*corev1.Pod)
		if pod.Spec.HostNetwork || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		p := dataplane.Pod{Origin: dataplane.Origin{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name}}
		for _, ip := range pod.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				p.IPs = append(p.IPs, a)
			}
		}
		if len(p.IPs) > 0 {
			into.LocalPods = append(into.LocalPods, p)
		}
	}
	return nil
}
