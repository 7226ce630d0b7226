package externalroute

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// ServedPods are the scopes of the other nodes' pods every node reads: the gateway pods of
// the policies' dynamic hops; with the legacy annotations, every pod (a gateway pod is known
// by an annotation, which no list or watch can select).
func (c *Compiler) ServedPods(snap *watchers.Snapshot) ([]watchers.PodScope, error) {
	if c.Legacy {
		return []watchers.PodScope{{}}, nil
	}
	policies, err := snap.ExternalRoutes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var namespaces []*corev1.Namespace
	var out []watchers.PodScope
	for _, p := range policies {
		for _, h := range p.Spec.NextHops.DynamicHops {
			nsSel, err1 := metav1.LabelSelectorAsSelector(&h.NamespaceSelector)
			podSel, err2 := metav1.LabelSelectorAsSelector(&h.PodSelector)
			if err1 != nil || err2 != nil {
				continue // the policy fails its compile; its gateways are none
			}
			if namespaces == nil {
				if namespaces, err = snap.Namespaces.List(labels.Everything()); err != nil {
					return nil, err
				}
			}
			out = append(out, cluster.PodScopes(namespaces, nsSel, podSel)...)
		}
	}
	return out, nil
}
