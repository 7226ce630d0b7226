package cluster

import (
	"cmp"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/watchers"
)

// LocalPods lists the pods of a node that egressd classifies: running on the pod network (not
// hostNetwork), not finished, with addresses. An address reused while its old pod is still
// terminating belongs to the pod that is not being deleted, else to the newest. Announced pods
// (the CNI plugin's, with their addresses before the Pod object shows them) replace the node's
// pods of the same name, or add to them.
func LocalPods(snap *watchers.Snapshot, node string, announced ...*watchers.Pod) ([]dataplane.Pod, error) {
	objs, err := snap.PodIndex.ByIndex(watchers.PodsByNode, node)
	if err != nil {
		return nil, fmt.Errorf("pods of node %s: %w", node, err)
	}
	candidates := make([]*watchers.Pod, 0, len(objs)+len(announced))
	replaced := map[[2]string]bool{}
	for _, pod := range announced {
		replaced[[2]string{pod.Namespace, pod.Name}] = true
		candidates = append(candidates, pod)
	}
	for _, o := range objs {
		if pod := o.(*watchers.Pod); !replaced[[2]string{pod.Namespace, pod.Name}] {
			candidates = append(candidates, pod)
		}
	}
	pods := make([]*watchers.Pod, 0, len(candidates))
	for _, pod := range candidates {
		if pod.Spec.HostNetwork || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		pods = append(pods, pod)
	}
	// Strongest claim first: live before terminating, then newest, then by name (stable).
	sort.Slice(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if (a.DeletionTimestamp == nil) != (b.DeletionTimestamp == nil) {
			return a.DeletionTimestamp == nil
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return b.CreationTimestamp.Before(&a.CreationTimestamp)
		}
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name)) < 0
	})
	out := make([]dataplane.Pod, 0, len(pods))
	claimed := make(map[netip.Addr]bool, len(pods))
	for _, pod := range pods {
		p := dataplane.Pod{Origin: dataplane.Origin{Kind: KindPod, Namespace: pod.Namespace, Name: pod.Name}}
		for _, ip := range pod.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil && !claimed[a] {
				claimed[a] = true
				p.IPs = append(p.IPs, a)
			}
		}
		if len(p.IPs) > 0 {
			out = append(out, p)
		}
	}
	return out, nil
}
