package cloudprivateip

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	cloudv1 "github.com/egressd/egressd/api/cloudnetwork/v1"
	"github.com/egressd/egressd/api/generated/clientset/versioned"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// Requester makes the leader's CloudPrivateIPConfig requests. It writes specs only: the
// status is the CNCC's.
type Requester struct {
	Client   versioned.Interface
	Recorder record.EventRecorder
	Log      *slog.Logger

	// recorded are the events already recorded, so a lasting problem is reported once per
	// leadership rather than at every reconcile.
	recorded map[Event]bool
}

// Reset forgets the recorded events (a new leadership reports lasting problems again).
func (r *Requester) Reset() { r.recorded = map[Event]bool{} }

// Record records the events not recorded yet.
func (r *Requester) Record(events []Event) {
	for _, e := range events {
		if r.recorded[e] {
			continue
		}
		if r.recorded == nil {
			r.recorded = map[Event]bool{}
		}
		r.recorded[e] = true
		ref := &corev1.ObjectReference{Kind: "EgressIP", APIVersion: ovnv1.SchemeGroupVersion.String(), Name: e.EgressIP}
		r.Recorder.Event(ref, e.Type, e.Reason, e.Message)
	}
}

// Held is the package's Held, for the EgressIP controller (egressip.CloudIPs).
func (r *Requester) Held(eips []*ovnv1.EgressIP, cpics []*cloudv1.CloudPrivateIPConfig) []*ovnv1.EgressIP {
	return Held(eips, cpics)
}

// Plan returns the status items of desired that the cloud confirmed (cpics), records the
// plan's events, and returns the requests that bring the cloud to desired, to make once that
// status is written: a node unwires an IP before the cloud is told to release or move it.
func (r *Requester) Plan(eip string, desired []ovnv1.EgressIPStatusItem, cpics []*cloudv1.CloudPrivateIPConfig, nodeExists func(string) bool) ([]ovnv1.EgressIPStatusItem, func(context.Context)) {
	p := Reconcile(eip, desired, cpics, nodeExists)
	r.Record(p.Events)
	return p.Status, func(ctx context.Context) { r.Execute(ctx, p.Ops) }
}

// ReleaseOrphans releases the cloud's IPs that no EgressIP wants any more.
func (r *Requester) ReleaseOrphans(ctx context.Context, eips []*ovnv1.EgressIP, cpics []*cloudv1.CloudPrivateIPConfig) {
	r.Execute(ctx, Orphans(eips, cpics))
}

// Execute makes the requests in order; a failed one is logged and reported with upstream's
// event, and the next reconcile tries again.
func (r *Requester) Execute(ctx context.Context, ops []Op) {
	for _, op := range ops {
		if err := r.execute(ctx, op); err != nil {
			r.Log.Error("cloud request", "object", "EgressIP "+op.EgressIP, "ip", op.IP, "request", op.Kind.String(), "err", err)
			continue
		}
		r.Log.Info("cloud request made", "object", "EgressIP "+op.EgressIP, "cloudprivateipconfig", Name(op.IP), "request", op.Kind.String(), "node", op.Node)
	}
}

func (r *Requester) execute(ctx context.Context, op Op) error {
	api := r.Client.CloudNetworkV1().CloudPrivateIPConfigs()
	name := Name(op.IP)
	switch op.Kind {
	case Create:
		obj := &cloudv1.CloudPrivateIPConfig{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{OwnerAnnotation: op.EgressIP}},
			Spec:       cloudv1.CloudPrivateIPConfigSpec{Node: op.Node},
		}
		if _, err := api.Create(ctx, obj, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
			r.fail(op, ReasonAssignmentFailed, "created", err)
			return fmt.Errorf("CloudPrivateIPConfig %s: create: %w", name, err)
		}
	case Move:
		// The leader is the only writer of specs: a fresh read is enough to keep the CNCC's
		// status and finalizer.
		obj, err := api.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			obj.Spec.Node = op.Node
			_, err = api.Update(ctx, obj, metav1.UpdateOptions{FieldManager: fieldManager})
		}
		if err != nil {
			r.fail(op, ReasonUpdateFailed, "updated", err)
			return fmt.Errorf("CloudPrivateIPConfig %s: move to node %s: %w", name, op.Node, err)
		}
	case Delete:
		err := api.Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			r.fail(op, ReasonDeletionFailed, "deleted", err)
			return fmt.Errorf("CloudPrivateIPConfig %s: delete: %w", name, err)
		}
	}
	return nil
}

const fieldManager = "egressd-leader"

// fail reports a failed request with upstream's event.
func (r *Requester) fail(op Op, reason, verb string, err error) {
	r.Recorder.Eventf(&corev1.ObjectReference{Kind: "EgressIP", APIVersion: ovnv1.SchemeGroupVersion.String(), Name: op.EgressIP},
		corev1.EventTypeWarning, reason, "egress IP: %s for object EgressIP: %s could not be %s, err: %v", op.IP, op.EgressIP, verb, err)
}
