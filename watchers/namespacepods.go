package watchers

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// maxNamespaceWatches bounds the namespaces whose pods an agent watches one by one (a list and
// a watch each). Past it, one cluster-wide watch serves them all: the first full-size scale
// run, with 667 namespace watches started at once per egress agent, saturated the agents'
// priority level of the API server.
const maxNamespaceWatches = 32

// namespacePods is the store of that cluster-wide watch: it keeps the pods of its scopes and
// drops every other pod as it arrives, so that an egress node serving 10,000 pods of a
// cluster's 150,000 caches those 10,000. The watch still brings it every pod's changes.
type namespacePods struct {
	cache.Indexer
	scopes  map[string][]labels.Selector // namespace: its scopes' selectors
	handler cache.ResourceEventHandler
	synced  atomic.Bool
}

func newNamespacePods(scopes []PodScope, handler cache.ResourceEventHandler) (*namespacePods, error) {
	s := &namespacePods{scopes: map[string][]labels.Selector{}, handler: handler,
		Indexer: cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, servedPodIndexers())}
	for _, sc := range scopes {
		sel, err := labels.Parse(sc.Selector)
		if err != nil {
			return nil, fmt.Errorf("pod scope %s/%q: %w", sc.Namespace, sc.Selector, err)
		}
		s.scopes[sc.Namespace] = append(s.scopes[sc.Namespace], sel)
	}
	return s, nil
}

// dropped stands for every pod the store does not keep while a watch-list streams the initial
// pods into the reflector's temporary store: that store holds each such pod's key and this one
// object, not the decoded pod.
var dropped = &Pod{}

func (s *namespacePods) keep(p metav1.Object) bool {
	for _, sel := range s.scopes[p.GetNamespace()] {
		if sel.Matches(labels.Set(p.GetLabels())) {
			return true
		}
	}
	return false
}

// Transformer trims the pods kept, for the reflector's watch-list (cache.TransformingStore).
func (s *namespacePods) Transformer() cache.TransformFunc {
	return func(o any) (any, error) {
		if p, ok := o.(*corev1.Pod); ok {
			if !s.keep(p) {
				return dropped, nil
			}
			return trimPod(p), nil
		}
		return o, nil // dropped, or a Pod already
	}
}

func (s *namespacePods) Add(o any) error { return s.Update(o) }

func (s *namespacePods) Update(o any) error {
	full, ok := o.(*corev1.Pod)
	if !ok {
		return nil
	}
	if !s.keep(full) { // relabelled out of its scopes, if it was kept: then it is gone
		return s.Delete(full)
	}
	p := trimPod(full)
	old, existed, err := s.Indexer.Get(p)
	if err != nil {
		return err
	}
	if err := s.Indexer.Update(p); err != nil {
		return err
	}
	if existed {
		s.handler.OnUpdate(old, p)
	} else {
		s.handler.OnAdd(p, false)
	}
	return nil
}

func (s *namespacePods) Delete(o any) error {
	old, existed, err := s.Indexer.Get(o)
	if err != nil || !existed {
		return err
	}
	if err := s.Indexer.Delete(old); err != nil {
		return err
	}
	s.handler.OnDelete(old)
	return nil
}

// Replace takes the pods of a list (a plain one, or a watch-list's, already transformed).
func (s *namespacePods) Replace(list []any, rv string) error {
	var kept []any
	for _, o := range list {
		switch p := o.(type) {
		case *corev1.Pod: // a plain list's
			if s.keep(p) {
				kept = append(kept, trimPod(p))
			}
		case *Pod: // a watch-list's, trimmed by Transformer
			if p != dropped {
				kept = append(kept, p)
			}
		}
	}
	if err := s.Indexer.Replace(kept, rv); err != nil {
		return err
	}
	s.synced.Store(true)
	s.handler.OnAdd(&corev1.Pod{}, false) // one signal: consumers re-read the cache whole
	return nil
}

func (s *namespacePods) Resync() error { return nil }

// namespaceWatchKey names a cluster-wide watch by its scopes, which it is made for.
func namespaceWatchKey(scopes []PodScope) PodScope {
	h := sha256.New()
	for _, sc := range scopes {
		fmt.Fprintf(h, "%s\x00%s\x00", sc.Namespace, sc.Selector)
	}
	return PodScope{Selector: fmt.Sprintf("\x00%d namespace scopes %x", len(scopes), h.Sum(nil)[:8])}
}

// wideWatch is a running cluster-wide watch of namespaced scopes.
type wideWatch struct {
	key    PodScope
	covers map[PodScope]bool
}

// planWatches divides the scopes of want among the watches that serve them: one each (single),
// or, past maxNamespaceWatches namespaced scopes, those in one cluster-wide watch. A running
// cluster-wide watch (its scopes covered; nil: none) is kept (keepWide) while at most
// maxNamespaceWatches namespaced scopes are new to it, each watched alone meanwhile, and at
// most as many it covers are no longer wanted (their pods cost memory, not correctness: the
// features select the pods they read). Past either, a new one is made for want (wide), which
// lists every pod of the cluster again. So namespaces created or labelled one at a time do not
// each cost a list of the cluster.
func planWatches(want []PodScope, covered map[PodScope]bool) (single, wide []PodScope, keepWide bool) {
	var namespaced []PodScope
	for _, sc := range want {
		if sc.Namespace == "" {
			single = append(single, sc)
		} else {
			namespaced = append(namespaced, sc)
		}
	}
	slices.SortFunc(namespaced, PodScope.Compare)
	namespaced = slices.Compact(namespaced)
	if len(namespaced) <= maxNamespaceWatches {
		return append(single, namespaced...), nil, false
	}
	if covered != nil {
		var extra []PodScope
		for _, sc := range namespaced {
			if !covered[sc] {
				extra = append(extra, sc)
			}
		}
		if stale := len(covered) - (len(namespaced) - len(extra)); len(extra) <= maxNamespaceWatches && stale <= maxNamespaceWatches {
			return append(single, extra...), nil, true
		}
	}
	return single, namespaced, false
}

// startNamespaces runs one cluster-wide watch that caches the pods of scopes (namespaced).
// Called with s.mu held.
func (s *servedPods) startNamespaces(scopes []PodScope) (*scopeInformer, error) {
	store, err := newNamespacePods(scopes, s.handler)
	if err != nil {
		return nil, err
	}
	s.wide = &wideWatch{key: namespaceWatchKey(scopes), covers: map[PodScope]bool{}}
	for _, sc := range scopes {
		s.wide.covers[sc] = true
	}
	lw := cache.NewListWatchFromClient(s.kube.CoreV1().RESTClient(), "pods", metav1.NamespaceAll, fields.Everything())
	r := cache.NewReflectorWithOptions(lw, &corev1.Pod{}, store, cache.ReflectorOptions{
		Name: fmt.Sprintf("pods of %d namespace scopes", len(scopes)), ResyncPeriod: s.resync})
	x := &scopeInformer{indexer: store, synced: store.synced.Load, stop: make(chan struct{})}
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		r.Run(x.stop)
	}()
	return x, nil
}
