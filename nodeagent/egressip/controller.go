package egressip

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/egressd/egressd/api/generated/clientset/versioned"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/nodeagent/leader"
	"github.com/egressd/egressd/watchers"
)

// Controller is the leader's EgressIP controller: it probes the assignable nodes, places every
// egress IP (Assign) and writes status.items, recording upstream's events.
type Controller struct {
	Client   versioned.Interface
	Snapshot *watchers.Snapshot
	// Changed signals API changes, status included (another leader's writes, node changes).
	Changed <-chan struct{}
	Probes  leader.Reachability
	// HealthPort is the port of every agent's health endpoint on its node's primary address.
	HealthPort uint16
	Recorder   record.EventRecorder
	Log        *slog.Logger
	// Metrics, when set, follow the assignments this leader writes.
	Metrics *Metrics
	// Cloud selects cloud mode (egress IPs requested from the cloud through
	// CloudPrivateIPConfigs before they are used); CloudAuto turns it on while any node carries
	// the cloud's egress-ipconfig annotation.
	Cloud CloudMode
	// CloudIPs makes the CloudPrivateIPConfig requests in cloud mode.
	CloudIPs CloudIPs

	// recorded are the events of the last reconcile, so that a lasting problem is reported
	// once rather than at every reconcile, and again when it comes back after it cleared.
	recorded map[Event]bool
	// lost is since when this leader has found each node unable to keep egress IPs (for the
	// reassignment time).
	lost map[string]time.Time
	// Self is the node this controller runs on: it always answers its own probes, also when
	// its network is gone, so it does not count against isolation.
	Self string
	// wasIsolated: the last reconcile found no probed node reachable (logged once).
	wasIsolated bool
	// marks are the upstream marks this leader wrote that its cache did not show yet (mark.go).
	marks map[string]int
}

// CloudMode says whether egress IPs are requested from the cloud first.
type CloudMode int

const (
	CloudAuto CloudMode = iota
	CloudOff
	CloudOn
)

// ParseCloudMode reads the flag value: auto, true or false.
func ParseCloudMode(s string) (CloudMode, error) {
	switch s {
	case "auto":
		return CloudAuto, nil
	case "false":
		return CloudOff, nil
	case "true":
		return CloudOn, nil
	}
	return CloudAuto, fmt.Errorf("cloud mode %q: want auto, true or false", s)
}

// cloud decides the mode for one reconcile.
func (c *Controller) cloud(nodes []*corev1.Node) bool {
	switch c.Cloud {
	case CloudOn:
		return true
	case CloudOff:
		return false
	}
	return slices.ContainsFunc(nodes, func(n *corev1.Node) bool {
		_, ok := n.Annotations[CloudConfigAnnotation]
		return ok
	})
}

// Run reconciles after every change, probe result and every 30 s, until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	c.recorded, c.lost = map[Event]bool{}, map[string]time.Time{}
	if c.CloudIPs != nil {
		c.CloudIPs.Reset()
	}
	if c.Metrics != nil {
		defer c.Metrics.forget()
	}
	// true: removals were written; place the additions at once.
	leader.ReconcileLoop(ctx, 30*time.Second, c.Changed, c.Probes, c.reconcile)
}

// nodes are the API's nodes as the assignment sees them, and the health endpoints of the
// assignable ones (the nodes to probe).
func (c *Controller) nodes(apiNodes []*corev1.Node, cloud bool) ([]Node, map[string]netip.AddrPort) {
	targets := map[string]netip.AddrPort{}
	nodes := make([]Node, 0, len(apiNodes))
	for _, n := range apiNodes {
		node, err := NodeFromAPI(n, false, cloud)
		if err != nil {
			c.Log.Debug("node egress IP configuration", "node", n.Name, "err", err)
		}
		if node.Labeled {
			if a := node.Primary.ProbeAddress(); a.IsValid() {
				targets[n.Name] = netip.AddrPortFrom(a, c.HealthPort)
			}
		}
		nodes = append(nodes, node)
	}
	return nodes, targets
}

// isolated reports whether none of the probed nodes answers: then it is this controller that is
// cut off (its pod network, its node), not every egress node at once, and it moves nothing.
// Said once when it starts and when it ends.
func (c *Controller) isolated(targets map[string]netip.AddrPort) bool {
	is := leader.Isolated(targets, c.Self, c.Probes)
	if is != c.wasIsolated {
		if is {
			c.Log.Error("no egress node answers the reachability probes: this controller takes itself for isolated and moves no egress IP", "probed", len(targets))
		} else {
			c.Log.Info("egress nodes answer the reachability probes again", "probed", len(targets))
		}
	}
	c.wasIsolated = is
	return is
}

// Standby keeps probing the assignable nodes while this replica does not lead (changed: its
// own subscription to the API's changes), so that a replica taking over already knows which
// nodes are unreachable: when the leader's node fails together with an egress node, the egress
// IPs move as soon as the Lease does, not a probe window later.
func (c *Controller) Standby(ctx context.Context, changed <-chan struct{}) {
	leader.StandbyLoop(ctx, changed, func() {
		apiNodes, err := c.Snapshot.Nodes.List(labels.Everything())
		if err != nil {
			return
		}
		_, targets := c.nodes(apiNodes, c.cloud(apiNodes))
		c.Probes.Set(targets)
	})
}

// reconcile runs one assignment and writes what changed; it reports whether another run must
// follow at once (additions held back behind removals).
func (c *Controller) reconcile(ctx context.Context) bool {
	eips, err := c.Snapshot.EgressIPs.List(labels.Everything())
	if err != nil {
		return false
	}
	apiNodes, err := c.Snapshot.Nodes.List(labels.Everything())
	if err != nil {
		return false
	}
	cloud := c.cloud(apiNodes)
	nodes, targets := c.nodes(apiNodes, cloud)
	// The probed nodes first, then their verdicts: a node just added to the probes counts as
	// reachable until its probes say otherwise, so a new leader whose prober starts empty
	// keeps the assignments it finds instead of clearing them all at its first reconcile
	// (a standby's prober is warm: see Standby).
	c.Probes.Set(targets)
	if c.isolated(targets) {
		return false
	}
	c.writeMarks(ctx, eips)
	for i := range nodes {
		nodes[i].Reachable = c.Probes.Reachable(nodes[i].Name)
	}
	c.trackLost(nodes, eips, time.Now())
	if cloud {
		c.reconcileCloud(ctx, eips, nodes)
		return false // the CloudPrivateIPConfigs' changes bring the next reconcile
	}
	plan := Assign(eips, nodes)
	c.record(plan.Events, eips)
	c.observe(plan)
	changed := slices.DeleteFunc(slices.Clone(plan.Assignments), func(a Assignment) bool { return !a.Changed })
	written := c.writeStatuses(ctx, changed)
	again := false
	for i, a := range changed {
		if err := written[i].err; err != nil {
			c.Log.Error("write EgressIP status", "object", "EgressIP "+a.Name, "err", err)
			continue
		}
		c.Log.Info("egress IPs assigned", "object", "EgressIP "+a.Name, "items", a.Items)
		if c.Metrics != nil {
			var old []ovnv1.EgressIPStatusItem
			if e := find(eips, a.Name); e != nil {
				old = e.Status.Items
			}
			c.Metrics.record(a.Name, old, a.Items, c.lost, written[i].at)
		}
		again = again || a.Pending
	}
	return again
}

// statusWrite is how one write went: its error, and when it ended.
type statusWrite struct {
	err error
	at  time.Time
}

// writeStatuses writes the assignments' status.items and returns how each went, in their order.
func (c *Controller) writeStatuses(ctx context.Context, as []Assignment) []statusWrite {
	out := make([]statusWrite, len(as))
	// The writes of one reconcile never conflict: each is another object's, and an IP taken
	// from one node is given to another only in the reconcile after (Assignment.Pending).
	leader.Writes(len(as), func(i int) {
		err := c.writeStatus(ctx, as[i].Name, as[i].Items)
		out[i] = statusWrite{err: err, at: time.Now()}
	})
	return out
}

// reconcileCloud runs the assignment over what the leader holds in the cloud (confirmed and
// pending requests), publishes what the cloud confirmed, then makes the requests: status
// first, so a node unwires an IP before the cloud is told to release or move it.
func (c *Controller) reconcileCloud(ctx context.Context, eips []*ovnv1.EgressIP, nodes []Node) {
	cpics, err := c.Snapshot.CloudPrivateIPConfigs.List(labels.Everything())
	if err != nil {
		return
	}
	known := map[string]bool{}
	for _, n := range nodes {
		known[n.Name] = true
	}
	nodeExists := func(name string) bool { return known[name] }
	plan := Assign(c.CloudIPs.Held(eips, cpics), nodes)
	c.record(plan.Events, eips)
	c.observe(plan)
	for _, a := range plan.Assignments {
		obj := find(eips, a.Name)
		if obj == nil {
			continue
		}
		status, request := c.CloudIPs.Plan(a.Name, a.Items, cpics, nodeExists)
		if !slices.Equal(obj.Status.Items, status) && !(len(obj.Status.Items) == 0 && len(status) == 0) {
			if err := c.writeStatus(ctx, a.Name, status); err != nil {
				c.Log.Error("write EgressIP status", "object", "EgressIP "+a.Name, "err", err)
				continue // no request may run before the status it follows is written
			}
			c.Log.Info("egress IPs assigned", "object", "EgressIP "+a.Name, "items", status)
			if c.Metrics != nil {
				c.Metrics.record(a.Name, obj.Status.Items, status, c.lost, time.Now())
			}
		}
		request(ctx)
	}
	c.CloudIPs.ReleaseOrphans(ctx, eips, cpics)
}

// trackLost notes when each node that holds egress IPs (or is known) stops being able to keep
// them: not assignable, or gone from the cluster while the status still names it.
func (c *Controller) trackLost(nodes []Node, eips []*ovnv1.EgressIP, now time.Time) {
	if c.lost == nil {
		c.lost = map[string]time.Time{}
	}
	known := map[string]bool{}
	for i := range nodes {
		n := &nodes[i]
		known[n.Name] = true
		if n.assignable() {
			delete(c.lost, n.Name)
		} else if _, ok := c.lost[n.Name]; !ok {
			c.lost[n.Name] = now
		}
	}
	for _, e := range eips {
		for _, it := range e.Status.Items {
			if _, ok := c.lost[it.Node]; !ok && !known[it.Node] {
				c.lost[it.Node] = now
			}
		}
	}
}

// record records the assignment's events that the last reconcile did not have: a condition
// that cleared and came back is recorded again (the first Event may have expired long since).
func (c *Controller) record(events []Event, eips []*ovnv1.EgressIP) {
	seen := make(map[Event]bool, len(events))
	defer func() { c.recorded = seen }()
	for _, e := range events {
		seen[e] = true
		if c.recorded[e] {
			continue
		}
		ref := &corev1.ObjectReference{Kind: "EgressIP", APIVersion: ovnv1.SchemeGroupVersion.String(), Name: e.EgressIP}
		if obj := find(eips, e.EgressIP); obj != nil {
			ref.UID, ref.ResourceVersion = obj.UID, obj.ResourceVersion
		}
		c.Recorder.Event(ref, e.Type, e.Reason, e.Message)
	}
}

// observe exports what plan left without a node.
func (c *Controller) observe(plan Plan) {
	if c.Metrics != nil {
		c.Metrics.observeUnassigned(plan)
	}
}

// writeStatus replaces status.items, by a merge patch of them alone (EgressIP has no status
// subresource), when a fresh read shows them different.
func (c *Controller) writeStatus(ctx context.Context, name string, items []ovnv1.EgressIPStatusItem) error {
	if items == nil {
		items = []ovnv1.EgressIPStatusItem{}
	}
	e, err := c.Client.K8sOVNV1().EgressIPs().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if slices.Equal(e.Status.Items, items) {
		return nil
	}
	// A merge patch of status.items alone (EgressIP has no status subresource): an update of
	// the object read back would write its spec too, as this version's types render it (an
	// absent podSelector as {}), which deploy/node-policy.yaml refuses of an agent.
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"items": items}})
	if err != nil {
		return err
	}
	if _, err := c.Client.K8sOVNV1().EgressIPs().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "egressd-leader"}); err != nil {
		return fmt.Errorf("patch status.items: %w", err)
	}
	return nil
}

func find(eips []*ovnv1.EgressIP, name string) *ovnv1.EgressIP {
	for _, e := range eips {
		if e.Name == name {
			return e
		}
	}
	return nil
}
