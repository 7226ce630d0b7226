package nodeagent

import (
	"context"
	"log/slog"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"

	ovnac "github.com/egressd/egressd/api/generated/applyconfiguration/k8sovn/v1"
	"github.com/egressd/egressd/api/generated/clientset/versioned"
	"github.com/egressd/egressd/watchers"
)

// StatusAggregator is the leader's controller that writes the aggregate status.status of
// EgressFirewall and EgressQoS from the nodes' entries, as upstream's status manager does:
// not-correctly-applied as soon as one node failed, applied once every node reported success,
// unset until then; entries of nodes that no longer exist are removed.
type StatusAggregator struct {
	Client   versioned.Interface
	Snapshot *watchers.Snapshot
	Changed  <-chan struct{}
	Log      *slog.Logger
}

// Run reconciles after every change (and every 30 s) until ctx ends.
func (a *StatusAggregator) Run(ctx context.Context) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		a.reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.Changed:
		}
	}
}

// aggregate is the status of one object given its per-node messages ("<node>: <text>").
func aggregate(messages []string, nodes sets.Set[string], applied, notApplied string) (status string, stale []string) {
	reported := sets.New[string]()
	failed := false
	for _, m := range messages {
		node, text, ok := strings.Cut(m, ": ")
		if !ok {
			continue
		}
		if !nodes.Has(node) {
			stale = append(stale, node)
			continue
		}
		reported.Insert(node)
		failed = failed || strings.HasPrefix(text, notApplied)
	}
	switch {
	case failed:
		return notApplied, stale
	case reported.IsSuperset(nodes):
		return applied, stale
	}
	return "", stale
}

func (a *StatusAggregator) reconcile(ctx context.Context) {
	nodeList, err := a.Snapshot.Nodes.List(labels.Everything())
	if err != nil {
		return
	}
	nodes := sets.New[string]()
	for _, n := range nodeList {
		nodes.Insert(n.Name)
	}
	efs, _ := a.Snapshot.EgressFirewalls.List(labels.Everything())
	for _, ef := range efs {
		status, stale := aggregate(ef.Status.Messages, nodes, fwApplied, fwNotApplied)
		c := a.Client.K8sOVNV1().EgressFirewalls(ef.Namespace)
		for _, node := range stale { // applying nothing as that node drops what it owned
			_, err := c.ApplyStatus(ctx, ovnac.EgressFirewall(ef.Name, ef.Namespace).WithStatus(ovnac.EgressFirewallStatus()), metav1.ApplyOptions{FieldManager: node, Force: true})
			a.logErr(err, "remove stale node status", "EgressFirewall", ef.Namespace, node)
		}
		if status != ef.Status.Status {
			st := ovnac.EgressFirewallStatus()
			if status != "" {
				st.WithStatus(status)
			}
			_, err := c.ApplyStatus(ctx, ovnac.EgressFirewall(ef.Name, ef.Namespace).WithStatus(st), metav1.ApplyOptions{FieldManager: leaderManager, Force: true})
			a.logErr(err, "write aggregate status", "EgressFirewall", ef.Namespace, status)
		}
	}
	qs, _ := a.Snapshot.EgressQoSes.List(labels.Everything())
	for _, q := range qs {
		var msgs []string
		for _, cnd := range q.Status.Conditions {
			if node, ok := strings.CutPrefix(cnd.Type, qosZonePrefix); ok {
				msgs = append(msgs, node+": "+cnd.Message)
			}
		}
		status, stale := aggregate(msgs, nodes, qosApplied, qosNotApplied)
		c := a.Client.K8sOVNV1().EgressQoSes(q.Namespace)
		for _, node := range stale {
			_, err := c.ApplyStatus(ctx, ovnac.EgressQoS(q.Name, q.Namespace).WithStatus(ovnac.EgressQoSStatus()), metav1.ApplyOptions{FieldManager: node, Force: true})
			a.logErr(err, "remove stale node status", "EgressQoS", q.Namespace, node)
		}
		if status != q.Status.Status {
			st := ovnac.EgressQoSStatus()
			if status != "" {
				st.WithStatus(status)
			}
			_, err := c.ApplyStatus(ctx, ovnac.EgressQoS(q.Name, q.Namespace).WithStatus(st), metav1.ApplyOptions{FieldManager: leaderManager, Force: true})
			a.logErr(err, "write aggregate status", "EgressQoS", q.Namespace, status)
		}
	}
}

func (a *StatusAggregator) logErr(err error, what, kind, ns, detail string) {
	if err != nil {
		a.Log.Error(what, "object", kind+" "+ns+"/default", "detail", detail, "err", err)
	}
}
