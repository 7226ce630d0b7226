// Package cniserver is the agent's side of egressd's chained CNI plugin: a unix-socket server
// (protocol in cniapi) that learns a new pod from the plugin's ADD, before its Pod object shows
// an address, hands it to the sync loop at once, and answers the plugin only once a sync that
// included the pod has it in force: when the dataplane reports it so (InForce: its interface
// attached, everything else written before), else when the sync has been applied (Applied).
//
// The store is merged into what the sync loop compiles from (Overlay): a pod announced by the
// plugin is its Pod object (labels and all, from the informer or an API GET) with the plugin's
// addresses, until the plugin's DEL (or a GC that no longer lists its sandbox). The Pod object,
// when it arrives or changes, still supplies everything else: labels reconcile at the next sync.
package cniserver

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// entry is one sandbox the plugin announced.
type entry struct {
	id    string // CNI_CONTAINERID
	key   podKey
	ips   []netip.Addr
	host  []string      // the host-side interfaces the CNI made for it
	pod   *watchers.Pod // the Pod object (or a bare one) with ips in its status; never modified
	added time.Time
	// done is closed once a sync that included the pod has it in force without failure.
	done       chan struct{}
	programmed time.Time
	lastErr    error
	// targets are the egress nodes the applied state steers the pod to (their addresses).
	targets []netip.Addr
	// remote: another node's pod, announced by that node's agent (remote.go).
	remote remoteState
	// shown is the Pod object last found showing the sandbox's addresses (Overlay's alone):
	// cached objects are replaced, never changed, so it shows them as long as it is cached.
	shown *watchers.Pod
}

type podKey struct{ namespace, name string }

func (k podKey) String() string { return k.namespace + "/" + k.name }

func (k podKey) origin() dataplane.Origin {
	return dataplane.Origin{Kind: cluster.KindPod, Namespace: k.namespace, Name: k.name}
}

// applied is what the last applied state held for one pod.
type applied struct {
	ips    []netip.Addr
	failed error
}

// Store holds the announced sandboxes and what the last sync applied.
type Store struct {
	// Runtime, when set, names the host-side interfaces of pods whose ADD was never seen.
	Runtime *RuntimeCache

	mu   sync.Mutex
	byID map[string]*entry
	// changes counts the changes of byID: what Overlay adds to the snapshot's pods moves
	// its generation of pods (watchers.Generations.Adding).
	changes uint64
	// latestMap is latest's answer at the count of changes latestAt.
	latestMap map[podKey]*entry
	latestAt  uint64
	last      map[podKey]applied
	lastAt    time.Time
	changed   chan struct{}
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{byID: map[string]*entry{}, changed: make(chan struct{}, 1)}
}

// Changed receives a value when a pod is announced or forgotten: the sync loop should run.
func (s *Store) Changed() <-chan struct{} { return s.changed }

func (s *Store) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// announce records a sandbox with its addresses and host-side interfaces (replacing an earlier
// ADD of the same sandbox; remote: another node's pod its agent announced) and returns it.
func (s *Store) announce(id string, pod *watchers.Pod, ips []netip.Addr, host []string, remote bool) *entry {
	pod = pod.DeepCopy()
	pod.Status.PodIPs = nil
	for _, ip := range ips {
		pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip.String()})
	}
	if len(ips) > 0 {
		pod.Status.PodIP = ips[0].String()
	}
	e := &entry{id: id, key: podKey{pod.Namespace, pod.Name}, ips: ips, host: host, pod: pod, added: time.Now(), done: make(chan struct{}),
		remote: remoteState{announced: remote}}
	s.mu.Lock()
	s.byID[id] = e
	s.changes++
	s.mu.Unlock()
	s.signal()
	return e
}

// forget drops sandboxes; it reports whether one was known.
func (s *Store) forget(ids ...string) bool {
	s.mu.Lock()
	known := false
	for _, id := range ids {
		if _, ok := s.byID[id]; ok {
			delete(s.byID, id)
			s.changes++
			known = true
		}
	}
	s.mu.Unlock()
	if known {
		s.signal()
	}
	return known
}

// keepOnly drops every sandbox of this node not in valid (CNI GC); it returns how many it
// dropped.
func (s *Store) keepOnly(valid []string) int {
	s.mu.Lock()
	var drop []string
	for id, e := range s.byID {
		if !e.remote.announced && !slices.Contains(valid, id) {
			drop = append(drop, id)
		}
	}
	s.mu.Unlock()
	s.forget(drop...)
	return len(drop)
}

// latest is the newest announced sandbox of each pod, made again only after byID changed (a
// sync reads it twice, and a node's pods' entries stay until their CNI DEL). It is read only.
// s.mu is held.
func (s *Store) latest() map[podKey]*entry {
	if s.latestMap != nil && s.latestAt == s.changes {
		return s.latestMap
	}
	out := make(map[podKey]*entry, len(s.byID))
	for _, e := range s.byID {
		if o := out[e.key]; o == nil || e.added.After(o.added) {
			out[e.key] = e
		}
	}
	s.latestMap, s.latestAt = out, s.changes
	return out
}

// Overlay returns the snapshot to compile from: snap, whose pod lister also returns the
// announced pods, with the plugin's addresses; and the announced pods themselves, which
// cluster.LocalPods merges into the node's pods.
func (s *Store) Overlay(snap *watchers.Snapshot) (*watchers.Snapshot, []*watchers.Pod) {
	s.mu.Lock()
	latest := s.latest()
	s.mu.Unlock()
	pods := map[podKey]*watchers.Pod{}
	var list []*watchers.Pod
	remotes := s.includeRemotes(snap, latest)
	for k, e := range latest {
		if e.remote.announced && !remotes[k] {
			continue // no longer needed (includeRemotes)
		}
		p := e.pod
		if obj, err := snap.Pods.Pods(k.namespace).Get(k.name); err == nil && (e.pod.UID == "" || obj.UID == e.pod.UID) {
			if obj == e.shown {
				continue
			}
			if ips := statusIPs(obj); len(ips) == len(e.ips) && containsAll(ips, e.ips) {
				e.shown = obj
				continue // the object shows the sandbox's addresses: it says it all now
			}
			// The Pod object as it is now (labels reconcile), with the sandbox's addresses.
			p = obj.DeepCopy()
			p.Status.PodIPs, p.Status.PodIP = e.pod.Status.PodIPs, e.pod.Status.PodIP
		}
		pods[k] = p
		if !remotes[k] {
			list = append(list, p)
		}
	}
	out := *snap
	keys := make([]string, 0, len(pods))
	for k := range pods {
		keys = append(keys, k.namespace+"/"+k.name)
	}
	s.mu.Lock()
	out.Generations = snap.Generations.Adding(&corev1.Pod{}, s.changes, keys...)
	s.mu.Unlock()
	if len(pods) == 0 {
		return &out, nil
	}
	slices.SortFunc(list, func(a, b *watchers.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	out.Pods = &overlayLister{base: snap.Pods, pods: pods}
	return &out, list
}

// HostInterfaces sets the host-side interfaces of each pod of pods from its announced sandbox
// that has the same addresses (the CNI's word on them lasts as long as the sandbox), else from
// the runtime's cache of the sandbox's result (Runtime).
func (s *Store) HostInterfaces(pods []dataplane.Pod) {
	s.mu.Lock()
	latest := s.latest()
	s.mu.Unlock()
	for i := range pods {
		p := &pods[i]
		if p.Origin.Kind != cluster.KindPod {
			continue
		}
		e := latest[podKey{p.Origin.Namespace, p.Origin.Name}]
		switch {
		case e != nil && !e.remote.announced && len(e.host) > 0 && len(e.ips) == len(p.IPs) && containsAll(p.IPs, e.ips):
			p.HostInterfaces = e.host
		case s.Runtime != nil:
			p.HostInterfaces = s.Runtime.HostInterfaces(p.Origin.Namespace, p.Origin.Name, p.IPs)
		}
	}
}

// Applied learns the outcome of a sync: every announced pod that state holds with all its
// addresses, with neither the pod nor a policy of its namespace failing, is programmed.
func (s *Store) Applied(state *dataplane.State, res dataplane.Result) {
	last := held(state, res.Failed, nil)
	now := time.Now()
	targets := steerTargets(state)
	var snat map[netip.Addr]bool // made when an announced pod waits: an egress node SNATs 10,000
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.lastAt = last, now
	for _, e := range s.byID {
		if !e.programmed.IsZero() {
			continue
		}
		if e.remote.announced {
			if snat == nil {
				snat = snatted(state)
			}
			appliedRemote(e, snat, now)
			continue
		}
		settle(e, last, targets, now)
	}
}

// InForce learns, while a sync is applied, that pods are in force (dataplane.PodsInForce): the
// ADDs of those announced are answered then, not once the whole sync is.
func (s *Store) InForce(state *dataplane.State, pods []dataplane.Origin, failed map[dataplane.Origin]error) {
	keys := map[podKey]bool{}
	for _, o := range pods {
		if o.Kind == cluster.KindPod {
			keys[podKey{o.Namespace, o.Name}] = true
		}
	}
	s.mu.Lock()
	waiting := false
	for _, e := range s.byID {
		waiting = waiting || (e.programmed.IsZero() && !e.remote.announced && keys[e.key])
	}
	s.mu.Unlock()
	if !waiting {
		return
	}
	now := time.Now()
	last, targets := held(state, failed, keys), steerTargets(state)
	s.mu.Lock()
	defer s.mu.Unlock()
	// A CHECK right after the ADD finds the pod, before the sync ends.
	if s.last == nil {
		s.last, s.lastAt = map[podKey]applied{}, now
	}
	maps.Copy(s.last, last)
	for _, e := range s.byID {
		if e.programmed.IsZero() && !e.remote.announced && keys[e.key] {
			settle(e, last, targets, now)
		}
	}
}

// held is what state holds for each local pod (of only, when set), with the failures of the
// pod and of the policies of its namespace (another pod's failure, its interface gone, is not
// this one's).
func held(state *dataplane.State, failed map[dataplane.Origin]error, only map[podKey]bool) map[podKey]applied {
	n := len(state.Classifier.Pods)
	if only != nil {
		n = len(only)
	}
	last := make(map[podKey]applied, n)
	for _, p := range state.Classifier.Pods {
		if p.Origin.Kind != cluster.KindPod {
			continue
		}
		// A pod may come as several entries (one per routing mark of its addresses).
		k := podKey{p.Origin.Namespace, p.Origin.Name}
		if only != nil && !only[k] {
			continue
		}
		a := last[k]
		if a.ips == nil {
			a.ips = slices.Clip(p.IPs) // an entry of its second mark appends to a copy
		} else {
			a.ips = append(a.ips, p.IPs...)
		}
		last[k] = a
	}
	for o, err := range failed {
		for k, a := range last {
			if o == k.origin() || (o.Kind != cluster.KindPod && o.Namespace != "" && o.Namespace == k.namespace) {
				a.failed = fmt.Errorf("%s: %w", o, err)
				last[k] = a
			}
		}
	}
	return last
}

// settle marks an announced local pod programmed when last holds it with all its addresses and
// without failure. s.mu is held.
func settle(e *entry, last map[podKey]applied, targets map[podKey][]netip.Addr, now time.Time) {
	a, ok := last[e.key]
	switch {
	case !ok || !containsAll(a.ips, e.ips):
		// Not in this sync (it began before the ADD, or an address went to another pod).
	case a.failed != nil:
		e.lastErr = a.failed
	default:
		e.programmed, e.lastErr, e.targets = now, nil, targets[e.key]
		close(e.done)
	}
}

// check reports whether the last applied state holds the pod with all of ips, without failure.
func (s *Store) check(k podKey, ips []netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastAt.IsZero() {
		return fmt.Errorf("egressd has not applied a state yet")
	}
	a, ok := s.last[k]
	switch {
	case !ok:
		return fmt.Errorf("egressd does not hold pod %s", k)
	case !containsAll(a.ips, ips):
		return fmt.Errorf("egressd holds pod %s with addresses %v, not %v", k, a.ips, ips)
	case a.failed != nil:
		return fmt.Errorf("pod %s not programmed: %w", k, a.failed)
	}
	return nil
}

func containsAll(have, want []netip.Addr) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// overlayLister is a pod lister that returns the announced pods instead of (or besides) the
// informer's objects.
type overlayLister struct {
	base watchers.PodLister
	pods map[podKey]*watchers.Pod
}

func (l *overlayLister) List(sel labels.Selector) ([]*watchers.Pod, error) {
	base, err := l.base.List(sel)
	if err != nil {
		return nil, err
	}
	return l.merge(base, sel, ""), nil
}

func (l *overlayLister) Pods(namespace string) watchers.PodNamespaceLister {
	return &overlayNamespaceLister{l: l, namespace: namespace}
}

// merge replaces base's announced pods and adds the ones base lacks that match sel.
func (l *overlayLister) merge(base []*watchers.Pod, sel labels.Selector, namespace string) []*watchers.Pod {
	out := make([]*watchers.Pod, 0, len(base)+len(l.pods))
	seen := map[podKey]bool{}
	for _, p := range base {
		k := podKey{p.Namespace, p.Name}
		if a, ok := l.pods[k]; ok {
			seen[k] = true
			if sel.Matches(labels.Set(a.Labels)) {
				out = append(out, a)
			}
			continue
		}
		out = append(out, p)
	}
	for k, a := range l.pods {
		if seen[k] || (namespace != "" && k.namespace != namespace) || !sel.Matches(labels.Set(a.Labels)) {
			continue
		}
		out = append(out, a)
	}
	return out
}

type overlayNamespaceLister struct {
	l         *overlayLister
	namespace string
}

func (n *overlayNamespaceLister) List(sel labels.Selector) ([]*watchers.Pod, error) {
	base, err := n.l.base.Pods(n.namespace).List(sel)
	if err != nil {
		return nil, err
	}
	return n.l.merge(base, sel, n.namespace), nil
}

func (n *overlayNamespaceLister) Get(name string) (*watchers.Pod, error) {
	if p, ok := n.l.pods[podKey{n.namespace, name}]; ok {
		return p, nil
	}
	return n.l.base.Pods(n.namespace).Get(name)
}

// bare is the Pod object of a pod whose object could not be read: its namespace and name only
// (its namespace's EgressFirewall applies; label selectors reconcile once the object arrives).
func bare(namespace, name, node string) *watchers.Pod {
	return &watchers.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, CreationTimestamp: metav1.Now()},
		Spec:       watchers.PodSpec{NodeName: node},
	}
}
