package egressip

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// decided is what serving each selected pod takes on this node, kept across syncs with what it
// was decided from. While only pods changed, and the pods' journal names them
// (watchers.Generations.ChangedSince), a compile decides again for those alone: an egress node
// serves 10,000 pods, and deciding for all of them again at one pod's change was most of its
// sync.
type decided struct {
	valid   bool
	pods    watchers.Follower       // the pods changed since the last compile
	others  uint64                  // the generation of decisionReads the decisions were made under
	of      map[string]*podDecision // by pod key: only pods served or told of (events)
	evented map[string]bool         // the keys of of with events
	// What deciding for one pod reads, as of the last compile of everything.
	selections []selection
	egress     map[string][]egressNode
	secondary  []netip.Addr
	// part is the last part compiled.
	part Part
}

// decisionReads are the kinds of objects the decisions are made from besides pods: a change of
// one makes the next compile decide for every pod.
var decisionReads = []any{&ovnv1.EgressIP{}, &corev1.Node{}, &corev1.Namespace{}}

// podDecision is what serving one pod takes on this node: the object serving it, the entries,
// and the events of a local pod several objects select.
type podDecision struct {
	eip     string
	guarded []netip.Addr
	snat    []dataplane.SNAT
	steer   []cluster.Steer
	events  []Event
}

// selection is the pods an assigned EgressIP selects: those of namespaces its pod selector
// matches.
type selection struct {
	eip        *ovnv1.EgressIP
	namespaces map[string]bool
	pods       labels.Selector
}

// selections are the assigned EgressIPs' selections, as selectedPods reads them.
func selections(eips []*ovnv1.EgressIP, namespaces map[string][]*corev1.Namespace) []selection {
	var out []selection
	for _, e := range eips {
		sel, ok := podSelector(e)
		if !ok {
			continue
		}
		s := selection{eip: e, namespaces: make(map[string]bool, len(namespaces[e.Name])), pods: sel}
		for _, ns := range namespaces[e.Name] {
			s.namespaces[ns.Name] = true
		}
		out = append(out, s)
	}
	return out
}

// selecting are the assigned objects that select pod.
func (d *decided) selecting(pod *watchers.Pod) []*ovnv1.EgressIP {
	var out []*ovnv1.EgressIP
	for _, s := range d.selections {
		if s.namespaces[pod.Namespace] && s.pods.Matches(labels.Set(pod.Labels)) {
			out = append(out, s.eip)
		}
	}
	return out
}

// decide decides which of selecting serves pod, current serving it so far, and what that takes
// here; nil when nothing.
func (d *decided) decide(in *cluster.Input, pod *watchers.Pod, selecting []*ovnv1.EgressIP, current string) *podDecision {
	name, events := serving(pod, selecting, current)
	if pod.Spec.NodeName != in.Node {
		events = nil // each pod's agent reports it, once
	}
	if name == "" && len(events) == 0 {
		return nil
	}
	pd := &podDecision{eip: name, events: events}
	if name != "" {
		d.addPod(pd, in, pod, name, d.egress[name])
	}
	return pd
}

// set keeps pd as the decision for the pod of key (nil: none).
func (d *decided) set(key string, pd *podDecision) {
	delete(d.of, key)
	delete(d.evented, key)
	if pd == nil {
		return
	}
	d.of[key] = pd
	if len(pd.events) > 0 {
		d.evented[key] = true
	}
}

// assemble sets part's entries and events from every decision.
func (d *decided) assemble(part *Part) {
	for _, pd := range d.of {
		part.Guarded = append(part.Guarded, pd.guarded...)
		part.SNAT = append(part.SNAT, pd.snat...)
		part.Steer = append(part.Steer, pd.steer...)
	}
	slices.SortFunc(part.Guarded, netip.Addr.Compare)
	slices.SortFunc(part.SNAT, compareSNAT)
	slices.SortFunc(part.Steer, compareSteer)
	part.Events = d.events()
	d.part = *part
}

// events are the decisions' events, by pod key.
func (d *decided) events() []Event {
	var out []Event
	for _, key := range slices.Sorted(maps.Keys(d.evented)) {
		out = append(out, d.of[key].events...)
	}
	return out
}

// decideAgain decides again for the pods of keys (some may repeat), and patches the last part
// with what changed.
func (d *decided) decideAgain(in *cluster.Input, keys []string) (Part, error) {
	changed := make(map[string]bool, len(keys))
	for _, k := range keys {
		changed[k] = true
	}
	var gone, added podDecision
	events := false
	for key := range changed {
		ns, name, err := cache.SplitMetaNamespaceKey(key)
		if err != nil {
			continue
		}
		old := d.of[key]
		var pd *podDecision
		pod, err := in.Snap.Pods.Pods(ns).Get(name)
		switch {
		case err == nil:
			var current string
			if old != nil {
				current = old.eip
			}
			pd = d.decide(in, pod, d.selecting(pod), current)
		case !apierrors.IsNotFound(err):
			return Part{}, err
		}
		for _, p := range []*podDecision{old, pd} {
			if p != nil {
				events = events || len(p.events) > 0
			}
		}
		if old != nil {
			gone.add(old)
		}
		if pd != nil {
			added.add(pd)
		}
		d.set(key, pd)
	}
	part := d.part
	part.Guarded = patch(part.Guarded, gone.guarded, added.guarded, func(a netip.Addr) netip.Addr { return a }, netip.Addr.Compare)
	part.SNAT = patch(part.SNAT, gone.snat, added.snat, func(s dataplane.SNAT) dataplane.SNAT { return s }, compareSNAT)
	part.Steer = patch(part.Steer, gone.steer, added.steer, steerKey, compareSteer)
	if events {
		part.Events = d.events()
	}
	d.part = part
	return part, nil
}

func (pd *podDecision) add(o *podDecision) {
	pd.guarded = append(pd.guarded, o.guarded...)
	pd.snat = append(pd.snat, o.snat...)
	pd.steer = append(pd.steer, o.steer...)
}

// The entries' orders are total, so that a part patched equals one compiled whole.
func compareSNAT(a, b dataplane.SNAT) int {
	return cmp.Or(a.Pod.Compare(b.Pod), a.To.Compare(b.To), cmp.Compare(a.Origin.Name, b.Origin.Name))
}

func compareSteer(a, b cluster.Steer) int {
	return cmp.Or(a.PodIP.Compare(b.PodIP), cmp.Compare(a.Pod.Namespace, b.Pod.Namespace), cmp.Compare(a.Pod.Name, b.Pod.Name))
}

type steerID struct {
	ip  netip.Addr
	pod dataplane.Origin
}

func steerKey(s cluster.Steer) steerID { return steerID{s.PodIP, s.Pod} }

// patch returns sorted (ordered by compare) without one element of the same key as each of
// gone, and with add, in order. It copies: the part patched stays as it was.
func patch[T any, K comparable](sorted, gone, add []T, key func(T) K, compare func(a, b T) int) []T {
	if len(gone) == 0 && len(add) == 0 {
		return sorted
	}
	drop := make(map[K]int, len(gone))
	for _, g := range gone {
		drop[key(g)]++
	}
	slices.SortFunc(add, compare)
	out := make([]T, 0, len(sorted)+len(add))
	for _, s := range sorted {
		if k := key(s); drop[k] > 0 {
			drop[k]--
			continue
		}
		for len(add) > 0 && compare(add[0], s) < 0 {
			out, add = append(out, add[0]), add[1:]
		}
		out = append(out, s)
	}
	return slices.Clip(append(out, add...))
}
