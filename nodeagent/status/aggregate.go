package status

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egressd/egressd/api/generated/clientset/versioned"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/leader"
	"github.com/egressd/egressd/watchers"
)

// Aggregator is the leader's controller that writes the status of every EgressFirewall,
// EgressQoS and AdminPolicyBasedExternalRoute from the nodes' reports (NodeReport), in
// upstream's strings: the aggregate status.status (not applied as soon as one node failed,
// applied once every node programmed the object's generation, unset until then) and, up to
// PerNodeUpTo nodes, one entry per node as upstream's zones write it; above that, the entries
// of the nodes that failed or noted something. One write per object and change, by the
// controller, where upstream's zones write one per object and node.
type Aggregator struct {
	Client   versioned.Interface
	Snapshot *watchers.Snapshot // with NodeReports
	Changed  <-chan struct{}
	// Ignore selects the nodes egressd does not run on (e.g. Windows nodes, or nodes the
	// DaemonSet's affinity leaves out): they never report, and must not hold the aggregate
	// unknown forever. Nil ignores none.
	Ignore labels.Selector
	// PerNodeUpTo is the most nodes for which every node's entry is shown.
	PerNodeUpTo int
	Log         *slog.Logger

	// taken is, per object, the resourceVersion at which it took its generation: a node has
	// programmed the generation once its report's resourceVersion of the kind reaches it.
	// Kept across reconciles, and an object's entry dropped in the first pass without it.
	taken map[dataplane.Origin]*taken
	pass  uint64 // reconciles in this term
	// written is, per object, what was last written over which resourceVersion: not written
	// again before the cache shows the object changed.
	written map[dataplane.Origin]string
}

type taken struct {
	uid        types.UID
	generation int64
	rv         uint64
	// inherited: first seen in this leader's first reconcile, at a resourceVersion later than
	// the change (a previous leader knew it): its aggregate stays as written until every node
	// is past that resourceVersion, rather than turning unknown at each change of leader.
	inherited bool
	seen      uint64 // the last pass that saw the object
}

// upstreamManager is the field manager OVN-Kubernetes' cluster-manager writes status.status
// with; leaderManager is ours. The merge patches replace the lists whole, so entries other
// managers wrote (upstream's zones, an older egressd's agents) go with them.
const (
	upstreamManager = "cluster-manager"
	leaderManager   = "egressd-leader"
)

// Run reconciles after every change (and every 30 s) until ctx ends: one leadership term.
func (a *Aggregator) Run(ctx context.Context) {
	a.taken, a.written, a.pass = nil, nil, 0 // another leader may have written since an earlier term
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

// nodeReport is one node's report as the aggregate reads it.
type nodeReport struct {
	programmed map[dataplane.Kind]uint64
	objects    map[dataplane.Origin]nodeOutcome
}

type nodeOutcome struct {
	failure, note string
	gateways      []string
}

// view is what a reconcile reads once: the nodes, their reports, per kind the least
// resourceVersion every node has programmed, and which nodes list each object.
type view struct {
	nodes   []string // sorted
	reports map[string]nodeReport
	least   map[dataplane.Kind]uint64
	perNode bool
	listing map[dataplane.Origin][]string
}

func (a *Aggregator) view() (*view, error) {
	nodeList, err := a.Snapshot.Nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	v := &view{reports: map[string]nodeReport{}, least: map[dataplane.Kind]uint64{}, listing: map[dataplane.Origin][]string{}}
	for _, n := range nodeList {
		if a.Ignore == nil || !a.Ignore.Matches(labels.Set(n.Labels)) {
			v.nodes = append(v.nodes, n.Name)
		}
	}
	slices.Sort(v.nodes)
	v.perNode = len(v.nodes) <= a.PerNodeUpTo
	for _, k := range reportedKinds {
		v.least[k.kind] = ^uint64(0)
	}
	for _, node := range v.nodes {
		r, err := a.Snapshot.NodeReports.Get(node)
		if err != nil {
			clear(v.least) // a node that has not reported: nothing is applied everywhere
			continue
		}
		nr := nodeReport{programmed: map[dataplane.Kind]uint64{}, objects: map[dataplane.Origin]nodeOutcome{}}
		for kind, rv := range map[dataplane.Kind]string{cluster.KindEgressFirewall: r.Programmed.EgressFirewalls,
			cluster.KindEgressQoS: r.Programmed.EgressQoSes, cluster.KindExternalRoute: r.Programmed.AdminPolicyBasedExternalRoutes} {
			n, _ := strconv.ParseUint(rv, 10, 64) // empty or malformed: nothing known (0)
			nr.programmed[kind] = n
			v.least[kind] = min(v.least[kind], n)
		}
		for _, o := range r.Objects {
			origin := dataplane.Origin{Kind: dataplane.Kind(o.Kind), Namespace: o.Namespace, Name: o.Name}
			nr.objects[origin] = nodeOutcome{failure: o.Failure, note: o.Note, gateways: o.Gateways}
			v.listing[origin] = append(v.listing[origin], node)
		}
		v.reports[node] = nr
	}
	return v, nil
}

// outcome is node's outcome of o's generation taken at since, and whether it has one yet.
func (v *view) outcome(node string, o dataplane.Origin, since uint64) (nodeOutcome, bool) {
	r, ok := v.reports[node]
	if !ok || r.programmed[o.Kind] < since || since == 0 {
		return nodeOutcome{}, false
	}
	return r.objects[o], true
}

// entry is one node's entry in an object's status.
type entry struct{ node, text string }

// verdict is what the nodes say of o's generation as taken: whether one failed, whether
// all programmed it, and the entries to show, in the nodes' order (render's; a node yet to
// program the generation keeps the entry it has, current's). It runs for every object at
// every change of any: a settled object costs no map and no sort.
func (v *view) verdict(o dataplane.Origin, t taken, current func(node string) string, render func(node string, out nodeOutcome) string) (failed, applied bool, entries []entry) {
	nodes := v.listing[o] // in the nodes' order, as view lists them
	if v.perNode {
		nodes = v.nodes
	}
	for _, node := range nodes {
		out, done := v.outcome(node, o, t.rv)
		switch {
		case done:
			failed = failed || out.failure != ""
			if v.perNode || out.failure != "" || out.note != "" {
				entries = append(entries, entry{node, render(node, out)})
			}
		case v.perNode:
			if c := current(node); c != "" {
				entries = append(entries, entry{node, c})
			}
		}
	}
	return failed, !failed && t.rv != 0 && v.least[o.Kind] >= t.rv, entries
}

// since is when the object took its generation: the resourceVersion it has when first seen
// at that generation (in a leader's first reconcile, later than the change: a node's report
// moves past it too, every event counting, watchers.Captured.Through).
func (a *Aggregator) since(key dataplane.Origin, uid types.UID, generation int64, rv string) taken {
	t := a.taken[key]
	if t == nil || t.uid != uid || t.generation != generation {
		n, _ := strconv.ParseUint(rv, 10, 64)
		t = &taken{uid: uid, generation: generation, rv: n, inherited: a.pass == 1}
		a.taken[key] = t
	}
	t.seen = a.pass
	return *t
}

// byNode finds the entry "<node>: <text>" of a node in messages, indexing them at the first
// call (only an object some node has yet to program needs it).
func byNode(messages []string) func(node string) string {
	var index map[string]string
	return func(node string) string {
		if index == nil {
			index = make(map[string]string, len(messages))
			for _, m := range messages {
				if n, _, ok := strings.Cut(m, ": "); ok {
					index[n] = m
				}
			}
		}
		return index[node]
	}
}

// texts are the entries' texts, in order.
func texts(entries []entry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.text)
	}
	return out
}

// sameSet tells whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	if slices.Equal(a, b) {
		return true // as written: in order
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// aggregateOf is the aggregate status: notApplied as soon as one node failed, applied once
// every node programmed the object, unset until then (current, an inherited object's).
func aggregateOf(t taken, failed, allApplied bool, current, applied, notApplied string) string {
	switch {
	case failed:
		return notApplied
	case allApplied:
		return applied
	case t.inherited:
		return current
	}
	return ""
}

// statusWrite is one object's status to write, if it differs from what it has.
type statusWrite struct {
	key    dataplane.Origin // in taken and written
	object string           // names it in logs
	rv     string
	write  func(ctx context.Context, body []byte) error
	status map[string]any // the merge patch's status
}

type patched struct {
	statusWrite
	body []byte
}

func (a *Aggregator) reconcile(ctx context.Context) {
	v, err := a.view()
	if err != nil {
		return
	}
	if a.taken == nil {
		a.taken = map[dataplane.Origin]*taken{}
	}
	a.pass++
	var writes []statusWrite
	writes = append(writes, a.firewalls(v)...)
	writes = append(writes, a.qoses(v)...)
	writes = append(writes, a.routes(v)...)
	for o, t := range a.taken {
		if t.seen != a.pass {
			delete(a.taken, o) // deleted
		}
	}
	written := make(map[dataplane.Origin]string, len(writes))
	for _, w := range writes {
		if fp := a.written[w.key]; fp != "" {
			written[w.key] = fp
		}
	}
	var todo []patched
	for _, w := range writes {
		body, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": w.rv}, "status": w.status})
		if err != nil {
			continue
		}
		fp := w.rv + " " + string(body)
		if written[w.key] == fp {
			continue // written over this resourceVersion already: the cache has not caught up
		}
		written[w.key] = fp
		todo = append(todo, patched{w, body})
	}
	a.written = written
	// Several at once: each write is mostly a round trip, and one at a time the controller
	// settled about 30 a second (10,000 new EgressFirewalls: more than 5 minutes); the
	// client's rate limit still bounds the rate.
	var mu sync.Mutex
	leader.Writes(len(todo), func(i int) {
		if err := todo[i].write(ctx, todo[i].body); err != nil && ctx.Err() == nil {
			// A conflict or a deleted object is the cache behind the API, not a failure:
			// the object's next event reconciles it again.
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				a.Log.Debug("write status", "object", todo[i].object, "err", err)
			} else {
				a.Log.Error("write status", "object", todo[i].object, "err", err)
			}
			mu.Lock()
			delete(written, todo[i].key) // tried again at the next reconcile
			mu.Unlock()
		}
	})
}

// statusPatch writes name's status by JSON merge patch with a typed client's Patch: lists are
// replaced whole, and the body holds the resourceVersion it was computed from.
func statusPatch[T any](patch func(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (T, error), name string) func(context.Context, []byte) error {
	return func(ctx context.Context, body []byte) error {
		_, err := patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: leaderManager}, "status")
		return err
	}
}

// orNull is s, or JSON null (removing the field) when empty.
func orNull[T any](s []T) any {
	if len(s) == 0 {
		return nil
	}
	return s
}

func orNullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}
