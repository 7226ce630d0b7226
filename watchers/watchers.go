// Package watchers holds egressd's view of the cluster: typed informers for the seven egress
// APIs and the core objects they refer to, with transforms that drop what egressd never reads,
// and indexers for pods by node and by namespace. It exposes a read-only snapshot and a
// "something changed" signal; it holds no policy logic.
package watchers

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/listers"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	cloudv1 "github.com/egressd/egressd/api/cloudnetwork/v1"
	egressdv1alpha1 "github.com/egressd/egressd/api/egressd/v1alpha1"
	"github.com/egressd/egressd/api/generated/clientset/versioned"
	egressinformers "github.com/egressd/egressd/api/generated/informers/externalversions"
	ovninformers "github.com/egressd/egressd/api/generated/informers/externalversions/k8sovn/v1"
	cloudlisters "github.com/egressd/egressd/api/generated/listers/cloudnetwork/v1"
	egressdlisters "github.com/egressd/egressd/api/generated/listers/egressd/v1alpha1"
	ovnlisters "github.com/egressd/egressd/api/generated/listers/k8sovn/v1"
	netoplisters "github.com/egressd/egressd/api/generated/listers/networkoperator/v1"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
)

// Index names of the pod informer.
const (
	// PodsByNode indexes the node's own pods by node (with NodePods; else every pod).
	PodsByNode      = "node"
	PodsByNamespace = cache.NamespaceIndex // every informer of the factory has it
	// PodsByIP indexes pods of the pod network by the addresses their status shows.
	PodsByIP = "ip"
)

// PodIndexers are the indexes the pod cache adds to the factory's namespace index.
var PodIndexers = cache.Indexers{
	PodsByNode: func(obj any) ([]string, error) { return []string{obj.(*Pod).Spec.NodeName}, nil },
	PodsByIP: func(obj any) ([]string, error) {
		p := obj.(*Pod)
		if p.Spec.HostNetwork {
			return nil, nil
		}
		ips := make([]string, 0, len(p.Status.PodIPs))
		for _, ip := range p.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
		return ips, nil
	},
}

// Snapshot is the read-only view of the cluster that nodeagent compiles from. Listers read the
// shared caches: callers must not modify returned objects.
type Snapshot struct {
	Nodes          corelisters.NodeLister
	Namespaces     corelisters.NamespaceLister
	Pods           PodLister
	PodIndex       PodIndexer
	Services       corelisters.ServiceLister
	EndpointSlices discoverylisters.EndpointSliceLister
	// ServiceCIDRs are the cluster's service networks beyond the flags (networking.k8s.io/v1).
	ServiceCIDRs networkinglisters.ServiceCIDRLister

	EgressFirewalls       ovnlisters.EgressFirewallLister
	EgressQoSes           ovnlisters.EgressQoSLister
	EgressIPs             ovnlisters.EgressIPLister
	ExternalRoutes        ovnlisters.AdminPolicyBasedExternalRouteLister
	EgressServices        ovnlisters.EgressServiceLister
	EgressRouters         netoplisters.EgressRouterLister
	CloudPrivateIPConfigs cloudlisters.CloudPrivateIPConfigLister

	// NodeReports are the nodes' reports (nil unless the NodeReports option).
	NodeReports egressdlisters.NodeReportLister

	// Generations counts the changes of each kind (nil: unknown, as in a snapshot built by hand).
	Generations *Generations
	// Marks follow how far the caches of the kinds whose status nodes report on have come
	// (nil: unknown, as in a snapshot built by hand).
	Marks *Marks
}

// PodLister lists the cached pods, as corelisters.PodLister lists corev1.Pods.
type PodLister interface {
	List(sel labels.Selector) ([]*Pod, error)
	Pods(namespace string) PodNamespaceLister
}

// PodNamespaceLister lists and gets the cached pods of one namespace.
type PodNamespaceLister interface {
	List(sel labels.Selector) ([]*Pod, error)
	Get(name string) (*Pod, error)
}

// NewPodLister lists the Pods of indexer, which has the namespace index.
func NewPodLister(indexer cache.Indexer) PodLister {
	return podLister{listers.New[*Pod](indexer, corev1.Resource("pod"))}
}

type podLister struct{ listers.ResourceIndexer[*Pod] }

func (l podLister) Pods(namespace string) PodNamespaceLister {
	return listers.NewNamespaced(l.ResourceIndexer, namespace)
}

// PodIndexer looks pods up by one of PodIndexers' indexes.
type PodIndexer interface {
	ByIndex(index, value string) ([]any, error)
}

// Watchers owns the informers.
type Watchers struct {
	core informers.SharedInformerFactory
	// pods is the factory of the pod informer: core, or one whose lists and watches select
	// only some pods (OnlyPods).
	pods informers.SharedInformerFactory
	// served are the other nodes' pods an agent's node serves (NodePods; nil: pods holds all).
	served *servedPods
	egress egressinformers.SharedInformerFactory
	synced []cache.InformerSynced
	subs   []subscriber
	snap   Snapshot
	// pending is when the oldest change not yet taken by TakePending arrived (unix nanoseconds).
	pending atomic.Int64
	// trimsEgress: the egress API objects are trimmed (TrimEgress) before they are cached.
	trimsEgress bool
}

// Option narrows what the watchers cache.
type Option func(*options)

type options struct {
	podSelector labels.Selector
	node        string
	trimEgress  func(obj any)
	nodeReports bool
}

// NodeReports caches the nodes' NodeReports too (the controller, which writes the status of
// the objects they report on; agents neither read them nor may).
func NodeReports() Option { return func(o *options) { o.nodeReports = true } }

// OnlyPods caches only the pods sel selects, so that a process that reads a few pods (the
// controller: router pods) does not hold every pod of the cluster (several KB each).
func OnlyPods(sel labels.Selector) Option { return func(o *options) { o.podSelector = sel } }

// NodePods caches the pods of node, and of other nodes only those ServePods asks for: an
// agent compiles its own node's pods, and other nodes' only where its node serves them. The
// snapshot's Pods and PodIndex read both as one.
func NodePods(node string) Option { return func(o *options) { o.node = node } }

// TrimEgress applies trim to each egress API object after the transform that drops its managed
// fields, before it enters the cache: for what one process never reads of those objects.
func TrimEgress(trim func(obj any)) Option { return func(o *options) { o.trimEgress = trim } }

// New builds the informers; nothing runs until Start.
func New(kube kubernetes.Interface, egress versioned.Interface, resync time.Duration, opts ...Option) (*Watchers, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	w := &Watchers{
		core:        informers.NewSharedInformerFactoryWithOptions(kube, resync, informers.WithTransform(transform)),
		egress:      egressinformers.NewSharedInformerFactoryWithOptions(egress, resync, egressinformers.WithTransform(egressTransform(o.trimEgress))),
		trimsEgress: o.trimEgress != nil,
	}
	w.pods = w.core
	switch {
	case o.podSelector != nil:
		w.pods = informers.NewSharedInformerFactoryWithOptions(kube, resync, informers.WithTransform(transform),
			informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = o.podSelector.String() }))
	case o.node != "":
		w.pods = informers.NewSharedInformerFactoryWithOptions(kube, resync, informers.WithTransform(transform),
			informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
				lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", o.node).String()
			}))
		w.served = &servedPods{kube: kube, resync: resync, handler: w.notify(&corev1.Pod{}), scopes: map[PodScope]*scopeInformer{}}
	}
	pods := w.pods.Core().V1().Pods()
	if err := pods.Informer().AddIndexers(PodIndexers); err != nil {
		return nil, fmt.Errorf("pod indexers: %w", err)
	}
	// EgressFirewalls and EgressQoSes are read all at once or by name, never listed by
	// namespace: without the factory's namespace index, 10,000 firewalls in as many namespaces
	// cost no index entry each (a set of one key: 2.5 MB at the scale harness's size).
	firewalls := w.egress.InformerFor(&ovnv1.EgressFirewall{}, func(c versioned.Interface, resync time.Duration) cache.SharedIndexInformer {
		return ovninformers.NewFilteredEgressFirewallInformer(c, metav1.NamespaceAll, resync, cache.Indexers{}, nil)
	})
	if err := firewalls.SetTransform(sameRules(firewalls.GetStore(), egressTransform(o.trimEgress))); err != nil {
		return nil, fmt.Errorf("EgressFirewall transform: %w", err)
	}
	w.egress.InformerFor(&ovnv1.EgressQoS{}, func(c versioned.Interface, resync time.Duration) cache.SharedIndexInformer {
		return ovninformers.NewFilteredEgressQoSInformer(c, metav1.NamespaceAll, resync, cache.Indexers{}, nil)
	})
	ovn := w.egress.K8sOVN().V1()
	w.snap = Snapshot{
		Nodes:                 w.core.Core().V1().Nodes().Lister(),
		Namespaces:            w.core.Core().V1().Namespaces().Lister(),
		Pods:                  NewPodLister(pods.Informer().GetIndexer()),
		PodIndex:              pods.Informer().GetIndexer(),
		Services:              w.core.Core().V1().Services().Lister(),
		EndpointSlices:        w.core.Discovery().V1().EndpointSlices().Lister(),
		ServiceCIDRs:          w.core.Networking().V1().ServiceCIDRs().Lister(),
		EgressFirewalls:       ovn.EgressFirewalls().Lister(),
		EgressQoSes:           ovn.EgressQoSes().Lister(),
		EgressIPs:             ovn.EgressIPs().Lister(),
		ExternalRoutes:        ovn.AdminPolicyBasedExternalRoutes().Lister(),
		EgressServices:        ovn.EgressServices().Lister(),
		EgressRouters:         w.egress.NetworkOperator().V1().EgressRouters().Lister(),
		CloudPrivateIPConfigs: w.egress.CloudNetwork().V1().CloudPrivateIPConfigs().Lister(),
	}
	if w.served != nil {
		union := &podUnion{local: pods.Informer().GetIndexer(), served: w.served}
		w.snap.Pods, w.snap.PodIndex = union, union
	}
	// Each informer with the Go type of its objects (the key of its generation count).
	informers := []struct {
		kind any
		inf  cache.SharedIndexInformer
	}{
		{&corev1.Node{}, w.core.Core().V1().Nodes().Informer()},
		{&corev1.Namespace{}, w.core.Core().V1().Namespaces().Informer()},
		{&corev1.Pod{}, pods.Informer()},
		{&corev1.Service{}, w.core.Core().V1().Services().Informer()},
		{&discoveryv1.EndpointSlice{}, w.core.Discovery().V1().EndpointSlices().Informer()},
		{&networkingv1.ServiceCIDR{}, w.core.Networking().V1().ServiceCIDRs().Informer()},
		{&ovnv1.EgressFirewall{}, ovn.EgressFirewalls().Informer()},
		{&ovnv1.EgressQoS{}, ovn.EgressQoSes().Informer()},
		{&ovnv1.EgressIP{}, ovn.EgressIPs().Informer()},
		{&ovnv1.AdminPolicyBasedExternalRoute{}, ovn.AdminPolicyBasedExternalRoutes().Informer()},
		{&ovnv1.EgressService{}, ovn.EgressServices().Informer()},
		{&netopv1.EgressRouter{}, w.egress.NetworkOperator().V1().EgressRouters().Informer()},
		{&cloudv1.CloudPrivateIPConfig{}, w.egress.CloudNetwork().V1().CloudPrivateIPConfigs().Informer()},
	}
	if o.nodeReports {
		reports := w.egress.Egressd().V1alpha1().NodeReports()
		w.snap.NodeReports = reports.Lister()
		informers = append(informers, struct {
			kind any
			inf  cache.SharedIndexInformer
		}{&egressdv1alpha1.NodeReport{}, reports.Informer()})
	}
	kinds := make([]any, len(informers))
	for i := range informers {
		kinds[i] = informers[i].kind
	}
	// The firewall compile brings its statuses of every EgressFirewall up to date from those
	// that changed.
	w.snap.Generations = NewGenerations(kinds...).Journaled(&ovnv1.EgressFirewall{}, &corev1.Pod{})
	w.snap.Marks = NewMarks(&ovnv1.EgressFirewall{}, &ovnv1.EgressQoS{}, &ovnv1.AdminPolicyBasedExternalRoute{})
	for _, i := range informers {
		if _, err := i.inf.AddEventHandler(w.notify(i.kind)); err != nil {
			return nil, err
		}
		w.synced = append(w.synced, i.inf.HasSynced)
	}
	return w, nil
}

// notify is the handler of an informer of kind: it runs after the cache holds the change.
func (w *Watchers) notify(kind any) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			w.snap.Marks.Observe(kind, obj, true)
			w.changed(kind, obj, true)
		},
		UpdateFunc: func(old, new any) {
			// Of the egress APIs only trimmed objects are compared: whole ones change with every
			// status write (a copy to compare is costly).
			if (w.trimsEgress || !egressAPI(new)) && unchanged(old, new) {
				w.snap.Marks.Observe(kind, new, false)
				return
			}
			spec := !statusOnly(old, new)
			w.snap.Marks.Observe(kind, new, spec)
			w.changed(kind, new, spec)
		},
		DeleteFunc: func(obj any) {
			w.snap.Marks.Observe(kind, obj, true)
			w.changed(kind, obj, true)
		},
	}
}

// changed counts a change of obj, of kind (unless only its status changed), then signals.
func (w *Watchers) changed(kind, obj any, spec bool) {
	key, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(obj) // "" (unknown) if it fails
	if spec {
		w.snap.Generations.Changed(kind, key)
	}
	w.signal(kind, spec)
}

type subscriber struct {
	ch        chan struct{}
	statusToo bool
	kinds     map[reflect.Type]bool // nil: all
}

// signal coalesces events: one pending notification is enough for a level-triggered consumer.
// An update of only the status of an egress API object reaches only subscribers that read
// status: the node's programming does not depend on it, and every status the controller writes
// would otherwise make every node recompile.
func (w *Watchers) signal(kind any, spec bool) {
	if spec {
		w.pending.CompareAndSwap(0, time.Now().UnixNano())
	}
	for _, s := range w.subs {
		if (!spec && !s.statusToo) || (s.kinds != nil && !s.kinds[reflect.TypeOf(kind)]) {
			continue
		}
		select {
		case s.ch <- struct{}{}:
		default:
		}
	}
}

// Start runs the informers and waits for their caches to fill.
func (w *Watchers) Start(ctx context.Context, log *slog.Logger) error {
	start := time.Now()
	w.core.Start(ctx.Done())
	if w.pods != w.core {
		w.pods.Start(ctx.Done())
	}
	w.egress.Start(ctx.Done())
	log.Info("waiting for informer caches")
	if !cache.WaitForCacheSync(ctx.Done(), w.synced...) {
		return fmt.Errorf("informer caches did not sync: %w", ctx.Err())
	}
	log.Info("informer caches synced", "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// Shutdown stops the informers and waits for their goroutines.
func (w *Watchers) Shutdown() {
	w.core.Shutdown()
	if w.pods != w.core {
		w.pods.Shutdown()
	}
	if w.served != nil {
		w.served.shutdown()
	}
	w.egress.Shutdown()
}

// Subscribe returns a channel that receives a value after any object changed since the last
// receive; statusToo includes updates of only the status of egress API objects; kinds (pointers
// to Go types, as &corev1.Node{}), when given, limit it to objects of those kinds (a consumer
// that reads no pods is not woken by every pod's churn). Call it before Start.
func (w *Watchers) Subscribe(statusToo bool, kinds ...any) <-chan struct{} {
	ch := make(chan struct{}, 1)
	sub := subscriber{ch: ch, statusToo: statusToo}
	if len(kinds) > 0 {
		sub.kinds = map[reflect.Type]bool{}
		for _, k := range kinds {
			sub.kinds[reflect.TypeOf(k)] = true
		}
	}
	w.subs = append(w.subs, sub)
	return ch
}

// TakePending returns when the oldest change since the last call arrived (zero if none), so
// that a consumer can measure change-to-programmed latency.
func (w *Watchers) TakePending() time.Time {
	if ns := w.pending.Swap(0); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Snapshot returns the read-only view of the caches.
func (w *Watchers) Snapshot() *Snapshot { return &w.snap }
