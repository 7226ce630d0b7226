package status

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/nodeagent/egressservice"
)

// publishNodeAnnotations keeps the node facts other agents read on the agent's own Node (and
// the EgressService host labels, see serviceLabels), in
// upstream's keys and formats: k8s.ovn.org/host-cidrs (a JSON list of every host address with
// its prefix length; nodeSelector rules and EgressIP conflicts read it) and
// k8s.ovn.org/node-primary-ifaddr (the address and prefix of the interface holding the Node's
// internal IP, per family; the primary network that hosts egress IPs).
// It returns, when it holds a label back (see serviceLabels), when to publish again.
func (w *Writer) publishNodeAnnotations(ctx context.Context, cidrs []netip.Prefix) (time.Duration, error) {
	if cidrs == nil {
		return 0, nil
	}
	node, err := w.Snapshot.Nodes.Get(w.Node)
	if err != nil {
		return 0, nil // not in the cache yet: the next report publishes
	}
	list := make([]string, len(cidrs))
	for i, c := range cidrs {
		list[i] = c.String()
	}
	hostCIDRs, err := json.Marshal(list)
	if err != nil {
		return 0, err
	}
	want := map[string]string{cluster.HostCIDRsKey: string(hostCIDRs)}
	if p := primaryIfAddr(node, cidrs); p.V4.IsValid() || p.V6.IsValid() {
		want[egressip.PrimaryIfAddrAnnotation] = p.Format()
	}
	changed := false
	for k, v := range want {
		changed = changed || node.Annotations[k] != v
	}
	labels, again := w.serviceLabels(node, time.Now())
	changed = changed || len(labels) > 0
	if !changed {
		return again, nil
	}
	meta := map[string]any{"annotations": want}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return 0, err
	}
	_, err = w.Kube.CoreV1().Nodes().Patch(ctx, w.Node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "egressd"})
	return again, err
}

// handoverGrace is how long a new host waits for the previous host's agent to take its label
// off before labelling its own Node anyway: that agent may be down with its node.
const handoverGrace = 5 * time.Second

// serviceLabels are the changes that make the node carry upstream's label
// egress-service.k8s.ovn.org/<namespace>-<name> for exactly the EgressServices it hosts
// (status.host, the leader's election): "" to add, nil to remove. The host's own agent writes
// them, so that agents change only their own Node. As upstream's cluster manager removes the
// label from the old host before it labels the new one (an LB provider announces the LB IP
// from the labelled node: two would both answer for it), a new host adds a label only once no
// other Node carries it, or handoverGrace after it first found it elsewhere; again says when
// to look again for a label held back.
func (w *Writer) serviceLabels(node *corev1.Node, now time.Time) (changes map[string]any, again time.Duration) {
	want := map[string]bool{}
	if w.Snapshot.EgressServices != nil {
		ess, _ := w.Snapshot.EgressServices.List(labels.Everything())
		for _, es := range ess {
			if es.Status.Host == w.Node {
				want[egressservice.NodeLabel(es.Namespace, es.Name)] = true
			}
		}
	}
	changes = map[string]any{}
	for k := range node.Labels {
		if strings.HasPrefix(k, egressservice.LabelPrefix+"/") && !want[k] {
			changes[k] = nil
		}
	}
	nodes, _ := w.Snapshot.Nodes.List(labels.Everything())
	waiting := map[string]time.Time{}
	for k := range want {
		if _, ok := node.Labels[k]; ok {
			continue
		}
		elsewhere := slices.ContainsFunc(nodes, func(n *corev1.Node) bool {
			_, ok := n.Labels[k]
			return ok && n.Name != w.Node
		})
		since, seen := w.labelWaits[k]
		if !seen {
			since = now
		}
		if left := handoverGrace - now.Sub(since); elsewhere && left > 0 {
			waiting[k] = since
			if again == 0 || left < again {
				again = left
			}
			continue
		}
		changes[k] = ""
	}
	w.labelWaits = waiting
	return changes, again
}

// primaryIfAddr is, per family, the host CIDR holding the Node's first internal IP.
func primaryIfAddr(n *corev1.Node, cidrs []netip.Prefix) egressip.PrimaryIfAddr {
	var p egressip.PrimaryIfAddr
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
