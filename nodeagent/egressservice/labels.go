package egressservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// labelChange is one node label to add ("") or remove (nil), as a merge patch sets it.
type labelChange struct {
	node, label string
	add         bool
}

// labelChanges are the changes that make exactly each service's host carry upstream's label
// egress-service.k8s.ovn.org/<namespace>-<name> (hosts: label -> node; a label of a service
// without a host is wanted nowhere). Removals come first: an LB provider such as MetalLB
// announces the LB IP from the labelled node, so two labelled nodes would both answer for it.
// A label is added only after its removals succeeded (see reconcileLabels).
func labelChanges(nodes []*corev1.Node, hosts map[string]string) (removals, additions []labelChange) {
	for _, n := range nodes {
		for k := range n.Labels {
			if strings.HasPrefix(k, LabelPrefix+"/") && hosts[k] != n.Name {
				removals = append(removals, labelChange{node: n.Name, label: k})
			}
		}
	}
	for k, host := range hosts {
		i := slices.IndexFunc(nodes, func(n *corev1.Node) bool { return n.Name == host })
		if i < 0 {
			continue // not in the cache (yet): nothing to label
		}
		if _, ok := nodes[i].Labels[k]; !ok {
			additions = append(additions, labelChange{node: host, label: k, add: true})
		}
	}
	order := func(a, b labelChange) int {
		return strings.Compare(a.node+"\x00"+a.label, b.node+"\x00"+b.label)
	}
	slices.SortFunc(removals, order)
	slices.SortFunc(additions, order)
	return removals, additions
}

// reconcileLabels writes labelChanges: the old host's label comes off before the new host's
// goes on, also when the old host's agent is dead while its Node is up (upstream's
// cluster-manager does the same). A label whose removal failed is not added this round.
func (c *Controller) reconcileLabels(ctx context.Context, nodes []*corev1.Node, hosts map[string]string) error {
	removals, additions := labelChanges(nodes, hosts)
	var errs []error
	failed := map[string]bool{}
	for _, ch := range removals {
		if err := c.patchLabel(ctx, ch); err != nil {
			failed[ch.label] = true
			errs = append(errs, err)
		}
	}
	for _, ch := range additions {
		if failed[ch.label] {
			continue
		}
		if err := c.patchLabel(ctx, ch); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) patchLabel(ctx context.Context, ch labelChange) error {
	var v any // nil removes
	if ch.add {
		v = ""
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{ch.label: v}}})
	if err != nil {
		return err
	}
	_, err = c.Kube.CoreV1().Nodes().Patch(ctx, ch.node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "egressd-controller"})
	if err != nil {
		verb := "remove"
		if ch.add {
			verb = "add"
		}
		return fmt.Errorf("Node %s: %s label %s: %w", ch.node, verb, ch.label, err)
	}
	c.Log.Info("egress service host label", "node", ch.node, "label", ch.label, "added", ch.add)
	return nil
}
