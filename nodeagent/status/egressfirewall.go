package status

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ovnac "github.com/egressd/egressd/api/generated/applyconfiguration/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
)

// Upstream's EgressFirewall status strings (SEMANTICS.md section 1.4).
const (
	fwApplied    = "EgressFirewall Rules applied"
	fwNotApplied = "EgressFirewall Rules not correctly applied"
)

// writeFirewallEntry writes "<node>: EgressFirewall Rules applied" (or the failure) into
// status.messages, a set each node owns its element of. A note follows the success (after
// "; "): the aggregate status reads the entry as applied still, as it is.
func writeFirewallEntry(ctx context.Context, w *Writer, o dataplane.Origin, failure error, note string) (bool, error) {
	ef, err := w.Snapshot.EgressFirewalls.EgressFirewalls(o.Namespace).Get(o.Name)
	if err != nil {
		return false, nil // deleted since
	}
	msg := w.Node + ": " + fwApplied
	switch {
	case failure != nil:
		msg = fmt.Sprintf("%s: %s: %v", w.Node, fwNotApplied, failure)
	case note != "":
		msg += "; " + note
	}
	if slices.Contains(ef.Status.Messages, msg) {
		return false, nil
	}
	switch {
	case failure != nil:
		w.Recorder.Eventf(ef, corev1.EventTypeWarning, "EgressFirewallNotApplied", "%s: %v", w.Node, failure)
	case note != "":
		w.Recorder.Eventf(ef, corev1.EventTypeWarning, "EgressFirewallNote", "%s: %s", w.Node, note)
	}
	ac := ovnac.EgressFirewall(o.Name, o.Namespace).WithStatus(ovnac.EgressFirewallStatus().WithMessages(msg))
	_, err = w.Client.K8sOVNV1().EgressFirewalls(o.Namespace).ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: w.Node, Force: true})
	return true, err
}
