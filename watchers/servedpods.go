package watchers

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// PodScope is a set of other nodes' pods an agent caches besides its node's own: those of
// Namespace ("": of every namespace) that Selector selects (a labels.Selector's String; "":
// every pod).
type PodScope struct {
	Namespace string
	Selector  string
}

// Compare orders scopes by namespace, then selector.
func (sc PodScope) Compare(o PodScope) int {
	return cmp.Or(cmp.Compare(sc.Namespace, o.Namespace), cmp.Compare(sc.Selector, o.Selector))
}

// servedPods are the other nodes' pods a node serves (an egress node's EgressIP pods, the
// gateway pods of external-route policies): one informer per scope, kept while the sync loop
// wants it (Watchers.ServePods). Every other pod of the cluster stays out of the agent's
// memory, and its changes out of the agent's watch.
type servedPods struct {
	kube    kubernetes.Interface
	resync  time.Duration
	handler cache.ResourceEventHandler
	mu      sync.Mutex
	scopes  map[PodScope]*scopeInformer
	// wide is the cluster-wide watch of many namespaces last started (nil: none).
	wide    *wideWatch
	closed  bool
	running sync.WaitGroup
}

type scopeInformer struct {
	indexer cache.Indexer
	synced  cache.InformerSynced
	stop    chan struct{}
}

// servedPodIndexers are those of the served pods' caches: by namespace and by address. Not by
// node: the node's own pods are all in its own cache, and the ten thousand pods an egress node
// may serve would each cost an entry of an index nobody reads.
func servedPodIndexers() cache.Indexers {
	return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, PodsByIP: PodIndexers[PodsByIP]}
}

// start runs an informer of sc's pods, trimmed and indexed as the node's own.
func (s *servedPods) start(sc PodScope) (*scopeInformer, error) {
	sel, err := labels.Parse(sc.Selector)
	if err != nil {
		return nil, fmt.Errorf("pod scope %s/%q: %w", sc.Namespace, sc.Selector, err)
	}
	inf := coreinformers.NewFilteredPodInformer(s.kube, sc.Namespace, s.resync, servedPodIndexers(),
		func(o *metav1.ListOptions) { o.LabelSelector = sel.String() })
	if err := inf.SetTransform(transform); err != nil {
		return nil, err
	}
	if _, err := inf.AddEventHandler(s.handler); err != nil {
		return nil, err
	}
	x := &scopeInformer{indexer: inf.GetIndexer(), synced: inf.HasSynced, stop: make(chan struct{})}
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		inf.Run(x.stop)
	}()
	return x, nil
}

// ServePods makes the other nodes' pods cached those of want: it starts an informer for each
// scope new in want and waits (until ctx ends) for those to fill; then it stops those no longer
// wanted. Until the new ones filled, the old ones stay: a pod moving from one scope to another
// (a namespace's scope replaced by the cluster's) is never missing meanwhile. A change of the
// set is a change of the pods the snapshot lists. Past maxNamespaceWatches namespaced scopes,
// one cluster-wide watch serves them (planWatches). Without NodePods, every pod is cached and
// ServePods does nothing.
func (w *Watchers) ServePods(ctx context.Context, want []PodScope) error {
	s := w.served
	if s == nil {
		return nil
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	var covered map[PodScope]bool
	if s.wide != nil {
		covered = s.wide.covers
	}
	single, wide, keepWide := planWatches(want, covered)
	starts := map[PodScope]func() (*scopeInformer, error){}
	for _, sc := range single {
		starts[sc] = func() (*scopeInformer, error) { return s.start(sc) }
	}
	if keepWide {
		starts[s.wide.key] = nil
	}
	if wide != nil {
		starts[namespaceWatchKey(wide)] = func() (*scopeInformer, error) { return s.startNamespaces(wide) }
	}
	var started []cache.InformerSynced
	var errs []error
	for sc, start := range starts {
		if s.scopes[sc] != nil {
			continue
		}
		x, err := start()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.scopes[sc] = x
		started = append(started, x.synced)
	}
	s.mu.Unlock()
	if len(started) > 0 && !cache.WaitForCacheSync(ctx.Done(), started...) {
		errs = append(errs, fmt.Errorf("the pods of %d new scopes did not all arrive (the scopes no longer wanted stay until they do): %w", len(started), ctx.Err()))
	}
	if len(errs) > 0 {
		return fmt.Errorf("served pods: %v", errs)
	}
	s.mu.Lock()
	stopped := false
	for sc, x := range s.scopes {
		if _, ok := starts[sc]; !ok {
			if s.wide != nil && s.wide.key == sc {
				s.wide = nil
			}
			close(x.stop)
			delete(s.scopes, sc)
			stopped = true
		}
	}
	s.mu.Unlock()
	if stopped {
		w.changed(&corev1.Pod{}, nil, true) // pods of several scopes: no one key
	}
	return nil
}

// shutdown stops every scope's informer and waits for them.
func (s *servedPods) shutdown() {
	s.mu.Lock()
	s.closed = true
	for sc, x := range s.scopes {
		close(x.stop)
		delete(s.scopes, sc)
	}
	s.mu.Unlock()
	s.running.Wait()
}

// indexers are the node's own pods' cache, then each scope's.
func (s *servedPods) indexers(local cache.Indexer) []cache.Indexer {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]cache.Indexer, 0, 1+len(s.scopes))
	out = append(out, local)
	for _, x := range s.scopes {
		out = append(out, x.indexer)
	}
	return out
}

// podUnion reads the node's own pods and the served ones as one cache, each pod once (the
// node's own copy first).
type podUnion struct {
	local  cache.Indexer
	served *servedPods
}

func (u *podUnion) collect(list func(cache.Indexer, func(any)) error) ([]*Pod, error) {
	seen := map[string]bool{}
	var out []*Pod
	for _, idx := range u.served.indexers(u.local) {
		err := list(idx, func(o any) {
			p := o.(*Pod)
			if k := p.Namespace + "/" + p.Name; !seen[k] {
				seen[k] = true
				out = append(out, p)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (u *podUnion) List(sel labels.Selector) ([]*Pod, error) {
	return u.collect(func(idx cache.Indexer, add func(any)) error { return cache.ListAll(idx, sel, add) })
}

func (u *podUnion) Pods(namespace string) PodNamespaceLister {
	return podUnionNamespace{u, namespace}
}

// ByIndex is the pods of every cache under the index's value; by node, those of the node's own
// cache (the served ones are not indexed by node).
func (u *podUnion) ByIndex(index, value string) ([]any, error) {
	if index == PodsByNode {
		return u.local.ByIndex(index, value)
	}
	pods, err := u.collect(func(idx cache.Indexer, add func(any)) error {
		objs, err := idx.ByIndex(index, value)
		for _, o := range objs {
			add(o)
		}
		return err
	})
	out := make([]any, len(pods))
	for i, p := range pods {
		out[i] = p
	}
	return out, err
}

type podUnionNamespace struct {
	u         *podUnion
	namespace string
}

func (n podUnionNamespace) List(sel labels.Selector) ([]*Pod, error) {
	return n.u.collect(func(idx cache.Indexer, add func(any)) error {
		return cache.ListAllByNamespace(idx, n.namespace, sel, add)
	})
}

func (n podUnionNamespace) Get(name string) (*Pod, error) {
	for _, idx := range n.u.served.indexers(n.u.local) {
		o, ok, err := idx.GetByKey(n.namespace + "/" + name)
		if err != nil {
			return nil, err
		}
		if ok {
			return o.(*Pod), nil
		}
	}
	return nil, apierrors.NewNotFound(corev1.Resource("pod"), name)
}
