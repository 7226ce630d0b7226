package egressservice

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"

	"github.com/egressd/egressd/api/generated/clientset/versioned"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/leader"
	"github.com/egressd/egressd/watchers"
)

// Controller is the leader's EgressService controller: it probes the candidate nodes (the
// EgressIP health probes), elects a host per EgressService (Elect), writes status.host and
// moves the host's node label (labels.go).
type Controller struct {
	Client   versioned.Interface
	Kube     kubernetes.Interface
	Snapshot *watchers.Snapshot
	// Networks are the cluster networks of the command line (an endpoint outside the cluster
	// networks is host-networked).
	Networks cluster.NetworkFlags
	// Changed signals API changes, status included.
	Changed <-chan struct{}
	// Probes is this controller's own prober (Set replaces the probed nodes).
	Probes     leader.Reachability
	HealthPort uint16
	Recorder   record.EventRecorder
	Log        *slog.Logger
	// Metrics, when set, count the services per host and the moves.
	Metrics *Metrics
	// Self is the node this controller runs on: it answers its own probes whatever its network,
	// so it does not count against isolation (leader.Isolated).
	Self string

	recorded map[string]string // namespace/name -> last reason recorded
}

// Run reconciles after every change, probe verdict and every 5 s (upstream's reachability
// period), until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	c.recorded = map[string]string{}
	if c.Metrics != nil {
		defer c.Metrics.forget()
	}
	leader.ReconcileLoop(ctx, 5*time.Second, c.Changed, c.Probes, func(ctx context.Context) bool {
		if err := c.reconcile(ctx); err != nil {
			c.Log.Error("egress services", "err", err)
		}
		return false
	})
}

// targets are the nodes to probe: every Ready node with a primary address.
func (c *Controller) targets(apiNodes []*corev1.Node) map[string]netip.AddrPort {
	targets := map[string]netip.AddrPort{}
	for _, n := range apiNodes {
		if !nodeReady(n) {
			continue
		}
		if to, ok := cluster.ProbeTarget(n, c.HealthPort); ok {
			targets[n.Name] = to
		}
	}
	return targets
}

// Standby keeps the candidates probed while this replica does not lead, so that a replica
// taking over already knows which nodes are unreachable (leader.StandbyLoop).
func (c *Controller) Standby(ctx context.Context, changed <-chan struct{}) {
	leader.StandbyLoop(ctx, changed, func() {
		if apiNodes, err := c.Snapshot.Nodes.List(labels.Everything()); err == nil {
			c.Probes.Set(c.targets(apiNodes))
		}
	})
}

func (c *Controller) reconcile(ctx context.Context) error {
	ess, err := c.Snapshot.EgressServices.List(labels.Everything())
	if err != nil {
		return err
	}
	apiNodes, err := c.Snapshot.Nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	// Probe every Ready node with a primary address: candidates start reachable.
	targets := c.targets(apiNodes)
	c.Probes.Set(targets)
	if leader.Isolated(targets, c.Self, c.Probes) {
		return fmt.Errorf("no node answers the reachability probes: this controller takes itself for isolated and moves no EgressService host")
	}
	candidates := make([]Candidate, 0, len(apiNodes))
	for _, n := range apiNodes {
		_, probed := targets[n.Name]
		candidates = append(candidates, Candidate{Name: n.Name, Labels: n.Labels, Ready: nodeReady(n),
			Reachable: probed && c.Probes.Reachable(n.Name)})
	}
	in := &cluster.Input{Snap: c.Snapshot, Networks: cluster.Networks(c.Snapshot, c.Networks)}
	reqs := make([]Request, 0, len(ess))
	byKey := map[string]*ovnv1.EgressService{}
	for _, es := range ess {
		byKey[es.Namespace+"/"+es.Name] = es
		svc, err := c.Snapshot.Services.Services(es.Namespace).Get(es.Name)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		var eps []endpoint
		if svc != nil && err == nil {
			if eps, err = Endpoints(in, svc); err != nil {
				return err
			}
		} else {
			svc = nil
		}
		reqs = append(reqs, RequestFor(es, svc, eps))
	}
	results := Elect(reqs, candidates)
	// The hosts that change are written together (each another object's), then looked at in
	// order.
	type write struct {
		wrote bool
		err   error
	}
	writes := make([]write, len(results))
	leader.Writes(len(results), func(i int) {
		r := results[i]
		if es := byKey[r.Namespace+"/"+r.Name]; r.Host != es.Status.Host {
			writes[i].wrote, writes[i].err = c.writeHost(ctx, es, r.Host)
		}
	})
	var errs []error
	hosts := make([]string, 0, len(results))
	labelled := map[string]string{} // node label -> the host that carries it
	var moves [][2]string
	for i, r := range results {
		key := r.Namespace + "/" + r.Name
		es := byKey[key]
		host := es.Status.Host
		if host != NoHost && host != NoSNATHost {
			labelled[NodeLabel(es.Namespace, es.Name)] = host
		}
		if r.Host != es.Status.Host {
			wrote, err := writes[i].wrote, writes[i].err
			if err != nil {
				errs = append(errs, err)
				hosts = append(hosts, host)
				continue
			}
			delete(labelled, NodeLabel(es.Namespace, es.Name))
			if r.Host != NoHost && r.Host != NoSNATHost {
				labelled[NodeLabel(es.Namespace, es.Name)] = r.Host
			}
			if wrote { // not when the cache was behind a write of ours
				c.Log.Info("egress service host", "object", "EgressService "+key, "host", r.Host, "previous", es.Status.Host, "reason", r.Reason)
				moves = append(moves, [2]string{es.Status.Host, r.Host})
			}
			host = r.Host
		}
		hosts = append(hosts, host)
		c.event(es, r.Host, r.Reason)
	}
	if c.Metrics != nil {
		c.Metrics.record(hosts, moves)
	}
	if err := c.reconcileLabels(ctx, apiNodes, labelled); err != nil {
		errs = append(errs, err)
	}
	if len(errs) != 0 {
		return fmt.Errorf("%v", errs)
	}
	return nil
}

// writeHost sets status.host of es, as upstream's GET + UpdateStatus (last writer wins, manual
// edits are overridden), but from the cached object: one request, not two, while the cache is
// current (500 services elected at once cost the leader's API rate half the time); a conflict
// reads the object again. wrote is false when the object already had host (the cache was
// behind) or is gone with host "".
func (c *Controller) writeHost(ctx context.Context, es *ovnv1.EgressService, host string) (wrote bool, err error) {
	cur := es.DeepCopy()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if cur.Status.Host == host {
			return nil
		}
		cur.Status.Host = host
		_, err := c.Client.K8sOVNV1().EgressServices(es.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{FieldManager: "egressd-leader"})
		if apierrors.IsConflict(err) {
			got, gerr := c.Client.K8sOVNV1().EgressServices(es.Namespace).Get(ctx, es.Name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			cur = got
		}
		wrote = err == nil
		return err
	})
	if apierrors.IsNotFound(err) && host == NoHost {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("EgressService %s/%s status.host=%q: %w", es.Namespace, es.Name, host, err)
	}
	return wrote, nil
}

// event records a Warning when a service wanting a host has none, or its host ALL waits for
// a usable Service, once per reason.
func (c *Controller) event(es *ovnv1.EgressService, host, reason string) {
	key := es.Namespace + "/" + es.Name
	if reason == "" || c.recorded[key] == reason {
		c.recorded[key] = reason
		return
	}
	c.recorded[key] = reason
	outcome := ": no node allocated"
	if host == NoSNATHost {
		outcome = ": host ALL, but no node applies it until then"
	}
	msg := map[string]string{
		ReasonNoLoadBalancer: "no Service of the same name of type LoadBalancer",
		ReasonNoIngressIP:    "the LoadBalancer Service has no ingress IP yet",
		ReasonNoEndpoints:    "the Service has no cluster-networked endpoints",
		ReasonNoNode:         "no Ready, reachable node matches the nodeSelector",
		ReasonBadSelector:    "invalid nodeSelector",
	}[reason] + outcome
	ref := &corev1.ObjectReference{Kind: "EgressService", APIVersion: ovnv1.SchemeGroupVersion.String(),
		Namespace: es.Namespace, Name: es.Name, UID: es.UID, ResourceVersion: es.ResourceVersion}
	c.Recorder.Event(ref, corev1.EventTypeWarning, reason, msg)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
