package egressip

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// ServedPods are the scopes of the other nodes' pods an egress node reads: on a node that may
// host egress IPs (labelled assignable, or named in an EgressIP's status), the pods every
// assigned EgressIP selects, whose traffic other nodes steer to their egress nodes. Other
// nodes read only their own pods.
func (c *Compiler) ServedPods(snap *watchers.Snapshot, node string) ([]watchers.PodScope, error) {
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
	picked := c.picked(snap)
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
		var namespaces []*corev1.Namespace
		if podSel.Empty() { // a scope per namespace; else one, whatever the namespaces
			if namespaces, err = picked.pick(snap, nsSel); err != nil {
				return nil, err
			}
		}
		out = append(out, cluster.PodScopes(namespaces, labels.Everything(), podSel)...)
	}
	return out, nil
}
