package cluster

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/watchers"
)

// PodScopes are the scopes of other nodes' pods a node caches to read the pods podSel selects
// in the namespaces nsSel selects (of namespaces): all namespaces' pods with podSel's labels;
// or, when podSel selects every pod, each selected namespace's pods (watchers.ServePods decides
// how many watches serve them).
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
	return out
}
