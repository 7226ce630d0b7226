package egressip

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// ServedPods are the scopes of the other nodes' pods an egress node reads: on a node that may
// host egress IPs (labelled assignable, or named in an EgressIP's status), the pods every
// assigned EgressIP selects, whose traffic other nodes steer to their egress nodes. Other
// nodes read only their own pods.
func ServedPods(snap *watchers.Snapshot, node string) ([]watchers.PodScope, error) {
	eips, err := snap.EgressIPs.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	egressNode := false
	if n, err := snap.Nodes.Get(node); err == nil {
		_, egressNode = n.Labels[AssignableLabel]
	}
	for _, e := range eips {
		for _, it := range e.Status.Items {
			egressNode = egressNode || it.Node == node
		}
	}
	if !egressNode {
		return nil, nil
	}
	namespaces, err := snap.Namespaces.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []watchers.PodScope
	for _, e := range eips {
		if len(e.Status.Items) == 0 {
			continue // selectedPods reads only assigned ones
		}
		nsSel, err1 := metav1.LabelSelectorAsSelector(&e.Spec.NamespaceSelector)
		podSel, err2 := metav1.LabelSelectorAsSelector(&e.Spec.PodSelector)
		if err1 != nil || err2 != nil {
			continue // an invalid selector selects nothing
		}
		out = append(out, cluster.PodScopes(namespaces, nsSel, podSel)...)
	}
	return out, nil
}
