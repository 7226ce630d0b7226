package egressip

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/watchers"
)

// pickedNamespaces are the namespaces each namespace selector picks, by the selector's string,
// matched when a selector is first met: valid while the namespaces stay (the Compiler starts
// anew when they change). An assignment changes an EgressIP (the CRD has no status
// subresource), its selectors seldom: matching 100 selectors against 10,000 namespaces again
// at each assignment was most of an egress node's CPU while the controller assigned them (its
// profiles at full size).
type pickedNamespaces struct {
	bySelector map[string][]*corev1.Namespace
	all        []*corev1.Namespace // listed at the first selector met
}

// pick returns the namespaces sel picks.
func (p *pickedNamespaces) pick(snap *watchers.Snapshot, sel labels.Selector) ([]*corev1.Namespace, error) {
	key := sel.String()
	if picked, ok := p.bySelector[key]; ok {
		return picked, nil
	}
	if p.all == nil {
		all, err := snap.Namespaces.List(labels.Everything())
		if err != nil {
			return nil, err
		}
		p.all = all
	}
	var picked []*corev1.Namespace
	for _, ns := range p.all {
		if sel.Matches(labels.Set(ns.Labels)) {
			picked = append(picked, ns)
		}
	}
	p.bySelector[key] = picked
	return picked, nil
}

// namespaceReads are the kinds of objects picked namespaces are valid for.
var namespaceReads = []any{&corev1.Namespace{}}

// picked is the Compiler's pickedNamespaces for snap's namespaces.
func (c *Compiler) picked(snap *watchers.Snapshot) *pickedNamespaces {
	p, _ := c.namespaces.Get(snap.Generations, namespaceReads, func() (*pickedNamespaces, error) {
		return &pickedNamespaces{bySelector: map[string][]*corev1.Namespace{}}, nil
	})
	return p
}
