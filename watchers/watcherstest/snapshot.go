// Package watcherstest builds watchers.Snapshot values over fixed objects, for unit tests of
// the pure compile steps.
package watcherstest

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	egressdv1alpha1 "github.com/egressd/egressd/api/egressd/v1alpha1"
	egressdlisters "github.com/egressd/egressd/api/generated/listers/egressd/v1alpha1"
	ovnlisters "github.com/egressd/egressd/api/generated/listers/k8sovn/v1"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/watchers"
)

// Snapshot is a Snapshot over the given objects, as the informers would hold them.
func Snapshot(objs ...runtime.Object) *watchers.Snapshot {
	snap, _ := Updatable(objs...)
	return snap
}

// Updatable is Snapshot, with a function that adds or replaces an object in its caches as an
// informer's event would (the caller counts the change in the snapshot's Generations, if any).
func Updatable(objs ...runtime.Object) (*watchers.Snapshot, func(runtime.Object)) {
	nsIdx := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, watchers.PodsByNode: watchers.PodIndexers[watchers.PodsByNode], watchers.PodsByIP: watchers.PodIndexers[watchers.PodsByIP]})
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	efs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nsIdx)
	qos := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nsIdx)
	eips := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	routes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	svcs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nsIdx)
	namespaces := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	slices := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nsIdx)
	egressServices := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nsIdx)
	reports := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	update := func(o runtime.Object) {
		switch o.(type) {
		case *corev1.Pod:
			_ = pods.Add(watchers.CachedPod(o.(*corev1.Pod)))
		case *watchers.Pod:
			_ = pods.Add(o)
		case *corev1.Node:
			_ = nodes.Add(o)
		case *ovnv1.EgressFirewall:
			_ = efs.Add(o)
		case *ovnv1.EgressQoS:
			_ = qos.Add(o)
		case *ovnv1.EgressIP:
			_ = eips.Add(o)
		case *ovnv1.AdminPolicyBasedExternalRoute:
			_ = routes.Add(o)
		case *corev1.Service:
			_ = svcs.Add(o)
		case *corev1.Namespace:
			_ = namespaces.Add(o)
		case *discoveryv1.EndpointSlice:
			_ = slices.Add(o)
		case *ovnv1.EgressService:
			_ = egressServices.Add(o)
		case *egressdv1alpha1.NodeReport:
			_ = reports.Add(o)
		}
	}
	for _, o := range objs {
		update(o)
	}
	return &watchers.Snapshot{
		Pods: watchers.NewPodLister(pods), PodIndex: pods, Nodes: corelisters.NewNodeLister(nodes),
		EgressFirewalls: ovnlisters.NewEgressFirewallLister(efs), EgressQoSes: ovnlisters.NewEgressQoSLister(qos),
		EgressIPs: ovnlisters.NewEgressIPLister(eips), ExternalRoutes: ovnlisters.NewAdminPolicyBasedExternalRouteLister(routes),
		Services: corelisters.NewServiceLister(svcs), Namespaces: corelisters.NewNamespaceLister(namespaces), EndpointSlices: discoverylisters.NewEndpointSliceLister(slices),
		EgressServices: ovnlisters.NewEgressServiceLister(egressServices), NodeReports: egressdlisters.NewNodeReportLister(reports),
	}, update
}
