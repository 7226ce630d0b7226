package status

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"

	ovnac "github.com/egressd/egressd/api/generated/applyconfiguration/k8sovn/v1"
	"github.com/egressd/egressd/api/generated/clientset/versioned"
	"github.com/egressd/egressd/nodeagent/leader"
	"github.com/egressd/egressd/watchers"
)

// Aggregator is the leader's controller that writes the aggregate status.status of
// EgressFirewall and EgressQoS from the nodes' entries, as upstream's status manager does:
// not-correctly-applied as soon as one node failed, applied once every node reported success,
// unset until then; entries of nodes that no longer exist are removed.
type Aggregator struct {
	Client   versioned.Interface
	Snapshot *watchers.Snapshot
	Changed  <-chan struct{}
	// Ignore selects the nodes egressd does not run on (e.g. Windows nodes, or nodes the
	// DaemonSet's affinity leaves out): they never report, and must not hold the aggregate
	// unknown forever. Nil ignores none.
	Ignore labels.Selector
	Log    *slog.Logger

	// settled are the objects whose aggregate was right, by kind/namespace/name, with the
	// resourceVersion it was right at, for the nodes named nodes. A reconcile looks again only
	// at what changed since: with 10,000 EgressFirewalls, each node's entry arriving made the
	// leader parse every object's messages again (half a core while 20,000 entries arrived).
	settled map[string]string
	nodes   string
}

// upstreamManager is the field manager OVN-Kubernetes' cluster-manager writes status.status
// with: after a migration, an aggregate it wrote is cleared by giving up its ownership.
const upstreamManager = "cluster-manager"

// Run reconciles after every change (and every 30 s) until ctx ends.
func (a *Aggregator) Run(ctx context.Context) {
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
	case nodes.Len() == 0:
		return "", stale // no node to report: unknown, as upstream writes nothing then
	case failed:
		return notApplied, stale
	case reported.IsSuperset(nodes):
		return applied, stale
	}
	return "", stale
}

func (a *Aggregator) reconcile(ctx context.Context) {
	nodeList, err := a.Snapshot.Nodes.List(labels.Everything())
	if err != nil {
		return
	}
	nodes := sets.New[string]()
	for _, n := range nodeList {
		if a.Ignore == nil || !a.Ignore.Matches(labels.Set(n.Labels)) {
			nodes.Insert(n.Name)
		}
	}
	prev := a.settled
	if names := strings.Join(sets.List(nodes), ","); names != a.nodes {
		prev, a.nodes = nil, names // every aggregate depends on the nodes
	}
	a.settled = map[string]string{}
	var mu sync.Mutex // a.settled, from the writes in flight
	settledAt := func(key, rv string) {
		mu.Lock()
		a.settled[key] = rv
		mu.Unlock()
	}
	// unsettled tells whether key needs a look (else it stays settled); done(true) settles it.
	unsettled := func(key, rv string) (bool, func(ok bool)) {
		if was, ok := prev[key]; ok && was == rv {
			settledAt(key, rv)
			return false, nil
		}
		return true, func(ok bool) {
			if ok {
				settledAt(key, rv)
			}
		}
	}
	// The objects to settle are written several at once: each write is mostly a round trip,
	// and one at a time the controller settled about 30 a second (10,000 new EgressFirewalls:
	// more than 5 minutes); the client's rate limit still bounds the rate.
	var writes []func()
	efs, _ := a.Snapshot.EgressFirewalls.List(labels.Everything())
	for _, ef := range efs {
		look, done := unsettled("EgressFirewall/"+ef.Namespace+"/"+ef.Name, ef.ResourceVersion)
		if !look {
			continue
		}
		c := a.Client.K8sOVNV1().EgressFirewalls(ef.Namespace)
		apply := func(st *ovnac.EgressFirewallStatusApplyConfiguration, manager string) error {
			_, err := c.ApplyStatus(ctx, ovnac.EgressFirewall(ef.Name, ef.Namespace).WithStatus(st), metav1.ApplyOptions{FieldManager: manager, Force: true})
			return err
		}
		writes = append(writes, func() {
			done(a.settle("EgressFirewall "+ef.Namespace+"/"+ef.Name, ef.Status.Messages, ef.Status.Status, nodes, fwApplied, fwNotApplied,
				func(manager string) error { return apply(ovnac.EgressFirewallStatus(), manager) },
				func(status string) error {
					return apply(ovnac.EgressFirewallStatus().WithStatus(status), leaderManager)
				}))
		})
	}
	qs, _ := a.Snapshot.EgressQoSes.List(labels.Everything())
	for _, q := range qs {
		look, done := unsettled("EgressQoS/"+q.Namespace+"/"+q.Name, q.ResourceVersion)
		if !look {
			continue
		}
		var msgs []string
		for _, cnd := range q.Status.Conditions {
			if node, ok := strings.CutPrefix(cnd.Type, qosZonePrefix); ok {
				msgs = append(msgs, node+": "+cnd.Message)
			}
		}
		c := a.Client.K8sOVNV1().EgressQoSes(q.Namespace)
		apply := func(st *ovnac.EgressQoSStatusApplyConfiguration, manager string) error {
			_, err := c.ApplyStatus(ctx, ovnac.EgressQoS(q.Name, q.Namespace).WithStatus(st), metav1.ApplyOptions{FieldManager: manager, Force: true})
			return err
		}
		writes = append(writes, func() {
			done(a.settle("EgressQoS "+q.Namespace+"/"+q.Name, msgs, q.Status.Status, nodes, qosApplied, qosNotApplied,
				func(manager string) error { return apply(ovnac.EgressQoSStatus(), manager) },
				func(status string) error { return apply(ovnac.EgressQoSStatus().WithStatus(status), leaderManager) }))
		})
	}
	leader.Writes(len(writes), func(i int) { writes[i]() }) // settled complete before the next reconcile reads it
	a.reconcileRoutes(ctx, nodes)
}

// settle removes the entries of nodes that are gone (applying nothing under a node's field
// manager drops what it owned) and writes the aggregate status when it changed; an empty
// aggregate is written by applying without the field, which removes it. It tells whether the
// object was right already (a write changes it: the next reconcile looks again).
func (a *Aggregator) settle(object string, msgs []string, current string, nodes sets.Set[string], applied, notApplied string,
	dropNode func(manager string) error, write func(status string) error) (right bool) {
	status, stale := aggregate(msgs, nodes, applied, notApplied)
	for _, node := range stale {
		if err := dropNode(node); err != nil {
			a.Log.Error("remove the status entry of a deleted node", "object", object, "node", node, "err", err)
		}
	}
	if status == current {
		return len(stale) == 0
	}
	var err error
	if status == "" {
		// Applying nothing gives up a manager's fields; the aggregate may be the leader's or,
		// after a migration, upstream's.
		err = errors.Join(dropNode(leaderManager), dropNode(upstreamManager))
	} else {
		err = write(status)
	}
	if err != nil {
		a.Log.Error("write aggregate status", "object", object, "status", status, "err", err)
	}
	return false
}
