package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	ovnac "github.com/egressd/egressd/api/generated/applyconfiguration/k8sovn/v1"
	"github.com/egressd/egressd/api/generated/clientset/versioned"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/watchers"
)

// Upstream's status strings (SEMANTICS.md section 8).
const (
	fwApplied     = "EgressFirewall Rules applied"
	fwNotApplied  = "EgressFirewall Rules not correctly applied"
	qosApplied    = "EgressQoS Rules applied"
	qosNotApplied = "EgressQoS Rules not correctly applied"
	qosZonePrefix = "Ready-In-Zone-"
	reasonSuccess = "SetupSucceeded"
	reasonFailed  = "SetupFailed"
	leaderManager = "egressd-leader"
)

// StatusWriter reports, for this node, what the last sync applied: one entry per object,
// written with server-side apply under the node's name as field manager, so that every node
// owns exactly its own entry. Writes run on their own goroutine: a slow API server never holds
// the dataplane back, and only the latest wanted status of an object is written.
type StatusWriter struct {
	Node     string
	Client   versioned.Interface
	Kube     kubernetes.Interface
	Snapshot *watchers.Snapshot
	Recorder record.EventRecorder
	Log      *slog.Logger
	// Changed, when set, signals status changes made by others: the last outcome is written
	// again where an entry of this node went missing or stale.
	Changed <-chan struct{}

	pending     chan report
	pendingOnce sync.Once // Run and Report start concurrently
}

// report is one sync's outcome: per-object failures and the node's host addresses.
type report struct {
	objects   map[dataplane.Origin]error
	hostCIDRs []netip.Prefix
}

// Run writes reported statuses until ctx ends.
func (w *StatusWriter) Run(ctx context.Context) {
	var last report
	for {
		var r report
		select {
		case <-ctx.Done():
			return
		case r = <-w.queue():
			last = r
		case <-w.Changed:
			r = last // entries already right are skipped
		}
		if err := w.publishHostCIDRs(ctx, r.hostCIDRs); err != nil {
			w.Log.Error("publish host addresses", "node", w.Node, "annotation", HostCIDRsKey, "err", err)
		}
		for origin, err := range r.objects {
			if ctx.Err() != nil {
				return
			}
			if werr := w.write(ctx, origin, err); werr != nil {
				w.Log.Error("write status", "object", origin.String(), "err", werr)
			}
		}
	}
}

func (w *StatusWriter) queue() chan report {
	w.pendingOnce.Do(func() { w.pending = make(chan report, 1) })
	return w.pending
}

// Report hands the outcome of a sync to the writer, replacing an outcome not yet written.
func (w *StatusWriter) Report(s *dataplane.State, res dataplane.Result) {
	out := map[dataplane.Origin]error{}
	for _, fw := range s.Firewalls {
		out[fw.Origin] = res.Failed[fw.Origin]
	}
	for _, q := range s.QoS {
		out[q.Origin] = res.Failed[q.Origin]
	}
	q := w.queue()
	select {
	case <-q: // drop the stale outcome
	default:
	}
	q <- report{objects: out, hostCIDRs: res.HostCIDRs}
}

// publishHostCIDRs keeps the node's k8s.ovn.org/host-cidrs annotation (upstream's key and
// format: a JSON list of CIDRs) equal to its addresses; nodeSelector rules read it.
func (w *StatusWriter) publishHostCIDRs(ctx context.Context, cidrs []netip.Prefix) error {
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
	if n, err := w.Snapshot.Nodes.Get(w.Node); err == nil && n.Annotations[HostCIDRsKey] == string(value) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{HostCIDRsKey: string(value)}}})
	if err != nil {
		return err
	}
	_, err = w.Kube.CoreV1().Nodes().Patch(ctx, w.Node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "egressd"})
	return err
}

func (w *StatusWriter) write(ctx context.Context, o dataplane.Origin, failure error) error {
	switch o.Kind {
	case "EgressFirewall":
		ef, err := w.Snapshot.EgressFirewalls.EgressFirewalls(o.Namespace).Get(o.Name)
		if err != nil {
			return nil // deleted since
		}
		msg := w.Node + ": " + fwApplied
		if failure != nil {
			msg = fmt.Sprintf("%s: %s: %v", w.Node, fwNotApplied, failure)
		}
		if slices.Contains(ef.Status.Messages, msg) {
			return nil
		}
		if failure != nil {
			w.Recorder.Eventf(ef, corev1.EventTypeWarning, "EgressFirewallNotApplied", "%s: %v", w.Node, failure)
		}
		ac := ovnac.EgressFirewall(o.Name, o.Namespace).WithStatus(ovnac.EgressFirewallStatus().WithMessages(msg))
		_, err = w.Client.K8sOVNV1().EgressFirewalls(o.Namespace).ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: w.Node, Force: true})
		return err
	case "EgressQoS":
		q, err := w.Snapshot.EgressQoSes.EgressQoSes(o.Namespace).Get(o.Name)
		if err != nil {
			return nil
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
				return nil
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
		return err
	}
	return nil
}
