package cluster

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/watchers"
)

// maxNamespaceScopes bounds the namespaces PodScopes watches one by one for a selector that
// selects every pod of them; past it, it watches every pod of the cluster once.
const maxNamespaceScopes = 16

// PodScopes are the scopes of other nodes' pods a node caches to read the pods podSel selects
// in the namespaces nsSel selects (of namespaces): all namespaces' pods with podSel's labels;
// or, when podSel selects every pod, each selected namespace's pods (the whole cluster's past
// maxNamespaceScopes namespaces).
func PodScopes(namespaces []*corev1.Namespace, nsSel, podSel labels.Selector) []watchers.PodScope {
	if _, ok := podSel.Requirements(); !ok {
		return nil // labels.Nothing: its String is that of Everything
	}
	if !podSel.Empty() {
		return []watchers.PodScope{{Selector: podSel.String()}}
	}
	var out []watchers.PodScope
	for _, ns := range namespaces {
		if nsSel.Matches(labels.Set(ns.Labels)) {
			out = append(out, watchers.PodScope{Namespace: ns.Name})
		}
	}
	if len(out) > maxNamespaceScopes {
		return []watchers.PodScope{{}}
	}
	return out
}
