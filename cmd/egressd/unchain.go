package main

import (
	"context"
	"log/slog"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/egressd/egressd/internal/cniinstall"
)

// daemonSetWatch follows the agent's own DaemonSet, so that an agent stopped because its
// DaemonSet was deleted (helm uninstall, kubectl delete) takes egressd-cni out of the node's
// chain: left there, the fail-closed plugin would stop every new pod of the node until someone
// ran egressctl cleanup. Any other stop (an upgrade's rolling restart, a deleted pod, a node
// going down) leaves the chain, so that no pod starts without policy meanwhile. The deletion
// is learnt by a watch opened while the agent runs: at uninstall, Helm and kubectl delete the
// agent's RBAC and ServiceAccount with the DaemonSet, so a request made once the pod is told to
// stop could not tell an uninstall from a lost API server.
type daemonSetWatch struct {
	log *slog.Logger
	mu  sync.Mutex
	// seen: the DaemonSet existed once; present: it exists and is not being deleted.
	seen, present bool
}

// watchDaemonSet follows DaemonSet namespace/name until ctx ends.
func watchDaemonSet(ctx context.Context, kube kubernetes.Interface, namespace, name string, log *slog.Logger) *daemonSetWatch {
	d := &daemonSetWatch{log: log}
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	// An informer's handler cannot fail to register before the informer runs.
	_, _ = f.Apps().V1().DaemonSets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { d.observe(o) },
		UpdateFunc: func(_, o any) { d.observe(o) },
		DeleteFunc: func(any) { d.observe(nil) },
	})
	f.Start(ctx.Done())
	log.Info("following the agent's DaemonSet: its deletion takes egressd-cni out of the chain", "daemonset", namespace+"/"+name)
	return d
}

// observe records the DaemonSet as the watch shows it (nil: deleted).
func (d *daemonSetWatch) observe(o any) {
	ds, _ := o.(*appsv1.DaemonSet)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen = true
	d.present = ds != nil && ds.DeletionTimestamp == nil
}

// deleted reports whether the DaemonSet, seen before, was deleted (or is being deleted) and
// not created again: an uninstall.
func (d *daemonSetWatch) deleted() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen && !d.present
}

// unchainIfDeleted takes egressd-cni out of the chain in confDir after an uninstall; the
// installer must have stopped.
func (d *daemonSetWatch) unchainIfDeleted(confDir string) {
	if !d.deleted() {
		return
	}
	if err := cniinstall.Unchain(confDir); err != nil {
		d.log.Error("egressd uninstalled, but egressd-cni is left in the CNI chain: new pods wait for an agent until egressctl cleanup removes it", "dir", confDir, "err", err)
		return
	}
	d.log.Info("egressd uninstalled (its DaemonSet deleted): egressd-cni taken out of the CNI chain", "dir", confDir)
}
