package status

import (
	"context"
	"encoding/json"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egressd/egressd/nodeagent/cluster"
)

// publishHostCIDRs keeps the node's k8s.ovn.org/host-cidrs annotation (upstream's key and
// format: a JSON list of CIDRs) equal to its addresses; nodeSelector rules read it.
func (w *Writer) publishHostCIDRs(ctx context.Context, cidrs []netip.Prefix) error {
	if cidrs == nil {
		return nil
	}
	list := make([]string, len(cidrs))
	for i, c := range cidrs {
		list[i] = c.String()
	}
	value, err := json.Marshal(list)
	if err != nil {
		return err
	}
	if n, err := w.Snapshot.Nodes.Get(w.Node); err == nil && n.Annotations[cluster.HostCIDRsKey] == string(value) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{cluster.HostCIDRsKey: string(value)}}})
	if err != nil {
		return err
	}
	_, err = w.Kube.CoreV1().Nodes().Patch(ctx, w.Node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "egressd"})
	return err
}
