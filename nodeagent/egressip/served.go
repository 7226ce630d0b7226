package egressip

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// NamespaceScopes are the namespaces each namespace selector picks, as pod scopes, by the
// selector's string: valid while the namespaces stay (the caller keeps it that long). An
// assignment changes an EgressIP (its status), its selectors seldom; matching 100 selectors
// against 10,000 namespaces again at each one was a third of an egress node's CPU while the
// controller assigned them (its profile at full size).
type NamespaceScopes map[string][]watchers.PodScope

// ServedPods are the scopes of the other nodes' pods an egress node reads: on a node that may
// host egress IPs (labelled assignable, or named in an EgressIP's status), the pods every
// assigned EgressIP selects, whose traffic other nodes steer to their egress nodes. Other
// nodes read only their own pods. known (nil: none) holds and receives what the namespace
// selectors picked.
func ServedPods(snap *watchers.Snapshot, node string, known NamespaceScopes) ([]watchers.PodScope, error) {
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
	var namespaces []*corev1.Namespace // listed at the first selector not known
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
		if !podSel.Empty() { // one scope, whatever the namespaces
			out = append(out, cluster.PodScopes(nil, nsSel, podSel)...)
			continue
		}
		scopes, ok := known[nsSel.String()]
		if !ok {
			if namespaces == nil {
				if namespaces, err = snap.Namespaces.List(labels.Everything()); err != nil {
					return nil, err
				}
			}
			scopes = cluster.PodScopes(namespaces, nsSel, podSel)
			if known != nil {
				known[nsSel.String()] = scopes
			}
		}
		out = append(out, scopes...)
	}
	return out, nil
}
