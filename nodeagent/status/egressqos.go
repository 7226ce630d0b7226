package status

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	ovnac "github.com/egressd/egressd/api/generated/applyconfiguration/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
)

// Upstream's EgressQoS status strings (SEMANTICS.md section 2.3).
const (
	qosApplied    = "EgressQoS Rules applied"
	qosNotApplied = "EgressQoS Rules not correctly applied"
	qosZonePrefix = "Ready-In-Zone-"
	reasonSuccess = "SetupSucceeded"
	reasonFailed  = "SetupFailed"
)

// writeQoSEntry writes this node's condition Ready-In-Zone-<node>; only a flip of its status
// moves its lastTransitionTime.
func writeQoSEntry(ctx context.Context, w *Writer, o dataplane.Origin, failure error, _ string) (bool, error) {
	q, err := w.Snapshot.EgressQoSes.EgressQoSes(o.Namespace).Get(o.Name)
	if err != nil {
		return false, nil
	}
	cond := metav1.Condition{Type: qosZonePrefix + w.Node, Status: metav1.ConditionTrue, Reason: reasonSuccess, Message: qosApplied}
	if failure != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, reasonFailed, fmt.Sprintf("%s: %v", qosNotApplied, failure)
	}
	cond.LastTransitionTime = metav1.Now()
	for _, c := range q.Status.Conditions {
		if c.Type != cond.Type {
			continue
		}
		if c.Status == cond.Status && c.Reason == cond.Reason && c.Message == cond.Message {
			return false, nil
		}
		if c.Status == cond.Status {
			cond.LastTransitionTime = c.LastTransitionTime // only a flip moves it
		}
	}
	if failure != nil {
		w.Recorder.Eventf(q, corev1.EventTypeWarning, "EgressQoSNotApplied", "%s: %v", w.Node, failure)
	}
	ac := ovnac.EgressQoS(o.Name, o.Namespace).WithStatus(ovnac.EgressQoSStatus().WithConditions(
		metav1ac.Condition().WithType(cond.Type).WithStatus(cond.Status).WithReason(cond.Reason).
			WithMessage(cond.Message).WithLastTransitionTime(cond.LastTransitionTime)))
	_, err = w.Client.K8sOVNV1().EgressQoSes(o.Namespace).ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: w.Node, Force: true})
	return true, err
}
