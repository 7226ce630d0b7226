package status

import (
	"context"
	"encoding/json"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egressd/egressd/nodeagent/cluster"
)

// publishNodeAnnotations keeps the node facts other agents read on the agent's own Node, in
// upstream's keys and formats: k8s.ovn.org/host-cidrs (a JSON list of every host address with
// its prefix length; nodeSelector rules and EgressIP conflicts read it) and
// k8s.ovn.org/node-primary-ifaddr (the address and prefix of the interface holding the Node's
// internal IP, per family; the primary network that hosts egress IPs). Labels are not the
// agent's: the controller writes EgressService host labels.
func (w *Reporter) publishNodeAnnotations(ctx context.Context, cidrs []netip.Prefix) error {
	if cidrs == nil {
		return nil
	}
	node, err := w.Snapshot.Nodes.Get(w.Node)
	if err != nil {
		return nil // not in the cache yet: the next report publishes
	}
	list := make([]string, len(cidrs))
	for i, c := range cidrs {
		list[i] = c.String()
	}
	hostCIDRs, err := json.Marshal(list)
	if err != nil {
		return err
	}
	want := map[string]string{cluster.HostCIDRsKey: string(hostCIDRs)}
	if p := primaryIfAddr(node, cidrs); p.V4.IsValid() || p.V6.IsValid() {
		want[cluster.PrimaryIfAddrAnnotation] = p.Format()
	}
	changed := false
	for k, v := range want {
		changed = changed || node.Annotations[k] != v
	}
	if !changed {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": want}})
	if err != nil {
		return err
	}
	_, err = w.Kube.CoreV1().Nodes().Patch(ctx, w.Node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "egressd"})
	return err
}

// primaryIfAddr is, per family, the host CIDR holding the Node's first internal IP.
func primaryIfAddr(n *corev1.Node, cidrs []netip.Prefix) cluster.PrimaryIfAddr {
	var p cluster.PrimaryIfAddr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		for _, c := range cidrs {
			if c.Addr() != ip.Unmap() {
				continue
			}
			if ip.Is4() && !p.V4.IsValid() {
				p.V4 = c
			} else if ip.Is6() && !p.V6.IsValid() {
				p.V6 = c
			}
		}
	}
	return p
}
