package egressrouter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/egressd/egressd/api/generated/clientset/versioned"
	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/leader"
	"github.com/egressd/egressd/watchers"
)

// createdTTL is how long a pod this leader created counts as existing while the informer does
// not show it yet (so that a quick second reconcile does not create another).
const createdTTL = 30 * time.Second

// Controller is the leader's EgressRouter controller: it probes the nodes (the EgressIP health
// probes: a dead node is noticed in under a second, not after the 5-minute pod eviction an
// operator's Deployment waits for), places one router pod per EgressRouter (decide), replaces a
// pod whose node fails or whose spec changed, removes pods of deleted EgressRouters, and writes
// the conditions of its decisions.
type Controller struct {
	Client   versioned.Interface
	Kube     kubernetes.Interface
	Snapshot *watchers.Snapshot
	// Changed signals API changes.
	Changed <-chan struct{}
	// Probes is this controller's own prober (Set replaces the probed nodes).
	Probes     leader.Reachability
	HealthPort uint16
	// Image runs the router pods (egressd's own).
	Image    string
	Recorder record.EventRecorder
	Log      *slog.Logger

	// created are pods this leader created, by EgressRouter UID, until the informer shows them.
	created map[types.UID]createdPod
	// refused are the EgressRouters whose last pod the API server refused.
	refused map[types.UID]bool
	// avoid are, per EgressRouter, the nodes where its spec's configuration failed (decide).
	avoid    map[types.UID]*avoided
	recorded map[types.UID]string // last warning reason recorded per EgressRouter
	// unreadySeen is when this leader first saw each router pod running and not ready, by pod
	// UID: its own clock, as the pod cache keeps no transition times (and nodes' clocks differ).
	unreadySeen map[types.UID]time.Time
}

type createdPod struct {
	routerPod
	at time.Time
}

// Run reconciles after every change, probe verdict and every 5 s, until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	c.created, c.refused, c.recorded = map[types.UID]createdPod{}, map[types.UID]bool{}, map[types.UID]string{}
	c.avoid, c.unreadySeen = map[types.UID]*avoided{}, map[types.UID]time.Time{}
	leader.ReconcileLoop(ctx, 5*time.Second, c.Changed, c.Probes, func(ctx context.Context) bool {
		if err := c.reconcile(ctx); err != nil {
			c.Log.Error("egress routers", "err", err)
		}
		return false
	})
}

func (c *Controller) reconcile(ctx context.Context) error {
	ers, err := c.Snapshot.EgressRouters.List(labels.Everything())
	if err != nil {
		return err
	}
	nodes, err := c.candidates()
	if err != nil {
		return err
	}
	pods, err := c.Snapshot.Pods.List(labels.SelectorFromSet(labels.Set{AppLabel: AppValue}))
	if err != nil {
		return err
	}
	byOwner := map[types.UID][]routerPod{}
	load := map[string]int{}
	live := map[types.UID]bool{}
	for _, er := range ers {
		live[er.UID] = true
	}
	for uid := range c.avoid {
		if !live[uid] {
			delete(c.avoid, uid)
		}
	}
	usable := map[string]bool{}
	for _, n := range nodes {
		usable[n.Name] = n.Ready && n.Reachable
	}
	var errs []error
	now := time.Now()
	unreadyNow := map[types.UID]time.Time{}
	for _, p := range pods {
		ref, ok := ownerOf(p)
		if !ok || p.DeletionTimestamp != nil {
			continue
		}
		if !live[ref.UID] { // its EgressRouter is gone (the garbage collector would get there too)
			errs = append(errs, c.deletePod(ctx, p.Namespace, p.Name, "its EgressRouter "+ref.Name+" is deleted"))
			continue
		}
		unready, stuck := unreadiness(c.unreadySeen, unreadyNow, p, now, usable[p.Spec.NodeName])
		byOwner[ref.UID] = append(byOwner[ref.UID], routerPod{Name: p.Name, Node: p.Spec.NodeName, specHash: p.Annotations[specHashAnnotation],
			unready: unready, stuck: stuck})
		load[p.Spec.NodeName]++
	}
	c.unreadySeen = unreadyNow
	for uid, cp := range c.created {
		seen := false
		for _, p := range byOwner[uid] {
			seen = seen || p.Name == cp.Name
		}
		switch {
		case !live[uid] || seen || time.Since(cp.at) > createdTTL:
			delete(c.created, uid)
		default:
			byOwner[uid] = append(byOwner[uid], cp.routerPod)
			load[cp.Node]++
		}
	}
	for _, er := range ers {
		errs = append(errs, c.place(ctx, er, nodes, byOwner[er.UID], load))
	}
	return errors.Join(errs...)
}

// candidates are the nodes with their readiness, reachability and host CIDRs; the Ready ones
// with a primary address are probed.
func (c *Controller) candidates() ([]candidate, error) {
	apiNodes, err := c.Snapshot.Nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	targets := map[string]netip.AddrPort{}
	out := make([]candidate, 0, len(apiNodes))
	for _, n := range apiNodes {
		ready := nodeReady(n)
		if to, ok := cluster.ProbeTarget(n, c.HealthPort); ok && ready {
			targets[n.Name] = to
		}
		out = append(out, candidate{Name: n.Name, Ready: ready, Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints,
			HostCIDRs: hostCIDRs(n)})
	}
	c.Probes.Set(targets)
	for i := range out {
		_, probed := targets[out[i].Name]
		out[i].Reachable = probed && c.Probes.Reachable(out[i].Name)
	}
	return out, nil
}

func hostCIDRs(n *corev1.Node) []netip.Prefix {
	var list []string
	_ = json.Unmarshal([]byte(n.Annotations[cluster.HostCIDRsKey]), &list) // unpublished: no network
	var out []netip.Prefix
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// place carries out the leader's decision for one EgressRouter: conditions first (so that the
// configuring node's report, which can only follow the pod's creation, is the last word), then
// deletions, then the new pod. After the API server refused a pod, retries write their conditions only
// once one succeeds, so that the status does not flap between "created" and "refused".
func (c *Controller) place(ctx context.Context, er *netopv1.EgressRouter, nodes []candidate, pods []routerPod, load map[string]int) error {
	key := "EgressRouter " + er.Namespace + "/" + er.Name
	cfg, compileErr := compile(er, nil)
	var first netip.Prefix
	if compileErr == nil {
		first = cfg.Addresses[0]
	}
	p := decide(first, er.Spec.NetworkInterface.Macvlan.Master, specHash(&er.Spec), compileErr, nodes,
		newPod(er, "", c.Image).Spec.Tolerations, pods, load, c.avoiding(er, pods))
	retry := p.Create != "" && c.refused[er.UID]
	if !retry {
		delete(c.refused, er.UID)
		if err := c.conditions(ctx, er, p); err != nil {
			return err
		}
	}
	if p.Create == "" {
		c.event(er, p)
	}
	if err := c.unready(ctx, er, p.Keep, pods); err != nil {
		return err
	}
	var errs []error
	for _, name := range p.Delete {
		errs = append(errs, c.deletePod(ctx, er.Namespace, name, p.Reason))
	}
	if p.Create == "" {
		return errors.Join(errs...)
	}
	pod, err := c.Kube.CoreV1().Pods(er.Namespace).Create(ctx, newPod(er, p.Create, c.Image), metav1.CreateOptions{FieldManager: "egressd-leader"})
	if err != nil {
		// Admission (quota, pod security, policies) may refuse the pod: say so where the user looks.
		c.refused[er.UID] = true
		refused := decision{Reason: reasonPodRefused, Message: fmt.Sprintf("creating the router pod on node %s failed: %v", p.Create, err)}
		c.event(er, refused)
		return errors.Join(append(errs, fmt.Errorf("%s: create router pod on node %s: %w", key, p.Create, err), c.conditions(ctx, er, refused))...)
	}
	c.created[er.UID] = createdPod{routerPod{Name: pod.Name, Node: p.Create, specHash: pod.Annotations[specHashAnnotation]}, time.Now()}
	load[p.Create]++
	c.Log.Info("egress router pod created", "object", key, "pod", pod.Name, "node", p.Create, "reason", p.Reason)
	c.event(er, p)
	if retry {
		delete(c.refused, er.UID)
		errs = append(errs, c.conditions(ctx, er, p))
	}
	return errors.Join(errs...)
}

// avoided are the nodes where a spec of a router could not be configured: passed over while
// the spec stays, so that a router that fails everywhere settles on one node (which keeps
// trying) instead of walking the cluster; the leader's memory, forgotten with its term.
type avoided struct {
	hash  string
	nodes []string
}

// avoiding are the nodes er's router is kept off (decide): those where its current spec's
// configuration failed, the node of the pod its status reports failed now included, and those
// of its stuck pods.
func (c *Controller) avoiding(er *netopv1.EgressRouter, pods []routerPod) []string {
	hash := specHash(&er.Spec)
	a := c.avoid[er.UID]
	if a == nil || a.hash != hash {
		a = &avoided{hash: hash}
		c.avoid[er.UID] = a
	}
	pod, node := failedPod(er)
	for _, p := range pods {
		failed := pod != "" && p.Name == pod && p.Node == node
		if (failed || p.stuck) && p.specHash == hash && !slices.Contains(a.nodes, p.Node) {
			a.nodes = append(a.nodes, p.Node)
		}
	}
	return a.nodes
}

// failedPod is the router pod, and its node, whose configuration the node reports failed (the
// Degraded condition of forConfiguration), if any.
func failedPod(er *netopv1.EgressRouter) (pod, node string) {
	for _, cond := range er.Status.Conditions {
		if cond.Type != netopv1.EgressRouterDegraded || cond.Status != netopv1.ConditionTrue || cond.Reason != reasonConfigFailed {
			continue
		}
		rest, ok := strings.CutPrefix(cond.Message, "router pod ")
		if !ok {
			continue
		}
		pod, rest, ok = strings.Cut(rest, " on node ")
		if !ok {
			continue
		}
		node, _, ok = strings.Cut(rest, ": ")
		if ok {
			return pod, node
		}
	}
	return "", ""
}

// conditions writes the conditions of a decision.
func (c *Controller) conditions(ctx context.Context, er *netopv1.EgressRouter, p decision) error {
	if conds, ok := forDecision(p); ok {
		return conds.write(ctx, c.Client, er, "egressd-leader")
	}
	return nil
}

// unready reports a kept pod that runs without its router (forUnready), once.
func (c *Controller) unready(ctx context.Context, er *netopv1.EgressRouter, keep string, pods []routerPod) error {
	for _, p := range pods {
		if p.Name != keep || !p.unready {
			continue
		}
		conds := forUnready(p.Name, p.Node)
		if c.recorded[er.UID] != reasonUnready {
			c.recorded[er.UID] = reasonUnready
			c.Recorder.Event(er, corev1.EventTypeWarning, reasonUnready, conds.Degraded.Message)
		}
		return conds.write(ctx, c.Client, er, "egressd-leader")
	}
	return nil
}

// unreadiness tells whether pod has been running and not ready, as far as the leader saw
// (before: when it first saw it so; seen: the same, of the pods it sees so now), for
// unreadyAfter (unready: reported), and, its node usable (Ready, reachable), for as long again
// (stuck: replaced). Any ready moment starts the count again.
func unreadiness(before, seen map[types.UID]time.Time, pod *watchers.Pod, now time.Time, usable bool) (unready, stuck bool) {
	if pod.Status.Phase != corev1.PodRunning || pod.Ready() {
		return false, false
	}
	since, ok := before[pod.UID]
	if !ok {
		since = now
	}
	seen[pod.UID] = since
	unready = now.Sub(since) > unreadyAfter
	return unready, unready && now.Sub(since) > 2*unreadyAfter && usable
}

// deletePod deletes a router pod at once (grace period 0): a router on a dead node must not
// wait for a kubelet that does not answer; its replacement announces the address (gratuitous
// ARP / NA), so the network forgets the old one's MAC.
func (c *Controller) deletePod(ctx context.Context, namespace, name, why string) error {
	err := c.Kube.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete router pod %s/%s (%s): %w", namespace, name, why, err)
	}
	c.Log.Info("egress router pod deleted", "pod", namespace+"/"+name, "reason", why)
	return nil
}

// event records the leader's decisions: a Normal event per pod created (once created), a Warning
// when there is no router, once per reason.
func (c *Controller) event(er *netopv1.EgressRouter, p decision) {
	switch {
	case p.Create != "":
		c.recorded[er.UID] = ""
		c.Recorder.Event(er, corev1.EventTypeNormal, p.Reason, p.Message)
	case p.Keep == "" && p.Reason != "" && c.recorded[er.UID] != p.Reason: // no router: why
		c.recorded[er.UID] = p.Reason
		c.Recorder.Event(er, corev1.EventTypeWarning, p.Reason, p.Message)
	}
}
