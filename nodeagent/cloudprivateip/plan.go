package cloudprivateip

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cloudv1 "github.com/egressd/egressd/api/cloudnetwork/v1"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// Event is a Kubernetes Event to record on the EgressIP EgressIP (cluster-scoped). Reasons and
// messages are upstream's where upstream has one.
type Event struct {
	EgressIP, Type, Reason, Message string
}

// Upstream's event reasons for the cloud requests (clustermanager/egressip_controller.go).
const (
	ReasonAssignmentFailed = "CloudAssignmentFailed"
	ReasonUpdateFailed     = "CloudUpdateFailed"
	ReasonDeletionFailed   = "CloudDeletionFailed"
	ReasonAssignmentRetry  = "CloudAssignmentRetry"
)

// OpKind is what a request does to a CloudPrivateIPConfig.
type OpKind int

const (
	// Create asks the cloud to attach the IP to Node.
	Create OpKind = iota
	// Move changes spec.node of an existing request to Node (upstream's update; the CNCC says
	// "Moving IP address").
	Move
	// Delete asks the cloud to release the IP.
	Delete
)

func (k OpKind) String() string { return [...]string{"create", "move", "delete"}[k] }

// Op is one request to make.
type Op struct {
	Kind     OpKind
	EgressIP string // the owner
	IP       netip.Addr
	Node     string // Create and Move: the node to attach the IP to
}

// Plan is what one EgressIP needs in cloud mode.
type Plan struct {
	// Status is the status.items to publish: the desired assignments the cloud confirmed, in
	// desired order. It must be written before Ops run: assignments leave the status (so the
	// nodes unwire them) before the cloud is told to release or move their IPs.
	Status []ovnv1.EgressIPStatusItem
	Ops    []Op
	Events []Event
}

// state is a CloudPrivateIPConfig as the requester reads it.
type state struct {
	obj   *cloudv1.CloudPrivateIPConfig
	ip    netip.Addr
	owner string
}

func (s *state) deleting() bool { return s.obj.DeletionTimestamp != nil }

// confirmed is the CNCC's success: status.node == spec.node and Assigned=True ("Consumer should
// only consider ADD / UPDATE successful when spec.node == status.node && Assigned == True").
func (s *state) confirmed() bool {
	c := meta.FindStatusCondition(s.obj.Status.Conditions, string(cloudv1.Assigned))
	return c != nil && c.Status == metav1.ConditionTrue && s.obj.Status.Node != "" && s.obj.Status.Node == s.obj.Spec.Node
}

// failed is the CNCC's error answer; its message says why.
func (s *state) failed() (string, bool) {
	c := meta.FindStatusCondition(s.obj.Status.Conditions, string(cloudv1.Assigned))
	if c == nil || c.Status != metav1.ConditionFalse {
		return "", false
	}
	return c.Message, true
}

// requests indexes the CloudPrivateIPConfigs by IP; objects whose name is not an IP are not
// egress IP requests and are left alone.
func requests(cpics []*cloudv1.CloudPrivateIPConfig) map[netip.Addr]*state {
	out := make(map[netip.Addr]*state, len(cpics))
	for _, c := range cpics {
		ip, err := ParseName(c.Name)
		if err != nil {
			continue
		}
		out[ip] = &state{obj: c, ip: ip, owner: c.Annotations[OwnerAnnotation]}
	}
	return out
}

// Held returns copies of the EgressIPs whose status.items are what the leader holds in cloud
// mode, the input of the assignment: each status item the cloud still backs (its request
// exists, belongs to the object and names the same node), then each pending request of the
// object (name order). So an IP requested but not yet confirmed keeps its node and counts in
// the nodes' loads and capacities, as in upstream's allocator cache, and a status item whose
// request vanished (e.g. deleted while no leader ran) is dropped, as upstream's
// syncCloudPrivateIPConfigs does.
func Held(eips []*ovnv1.EgressIP, cpics []*cloudv1.CloudPrivateIPConfig) []*ovnv1.EgressIP {
	reqs := requests(cpics)
	byOwner := map[string][]*state{}
	for _, s := range reqs {
		if s.owner != "" && !s.deleting() && s.obj.Spec.Node != "" {
			byOwner[s.owner] = append(byOwner[s.owner], s)
		}
	}
	out := make([]*ovnv1.EgressIP, 0, len(eips))
	for _, e := range eips {
		held := []ovnv1.EgressIPStatusItem{}
		seen := map[netip.Addr]bool{}
		for _, it := range e.Status.Items {
			ip, err := netip.ParseAddr(it.EgressIP)
			if err != nil || seen[ip] {
				continue
			}
			if s := reqs[ip]; s != nil && s.owner == e.Name && !s.deleting() && s.obj.Spec.Node == it.Node {
				held = append(held, it)
				seen[ip] = true
			}
		}
		mine := byOwner[e.Name]
		slices.SortFunc(mine, func(a, b *state) int { return cmp.Compare(a.obj.Name, b.obj.Name) })
		for _, s := range mine {
			if !seen[s.ip] {
				held = append(held, ovnv1.EgressIPStatusItem{Node: s.obj.Spec.Node, EgressIP: s.ip.String()})
			}
		}
		c := e.DeepCopy()
		c.Status.Items = held
		out = append(out, c)
	}
	return out
}

// Reconcile compares an EgressIP's desired assignments (the assignment's output over Held) with
// the cloud's requests. nodeExists says whether a Node object exists.
func Reconcile(eip string, desired []ovnv1.EgressIPStatusItem, cpics []*cloudv1.CloudPrivateIPConfig, nodeExists func(string) bool) Plan {
	reqs := requests(cpics)
	var p Plan
	wanted := map[netip.Addr]bool{}
	for _, it := range desired {
		ip, err := netip.ParseAddr(it.EgressIP)
		if err != nil {
			continue
		}
		wanted[ip] = true
		s := reqs[ip]
		switch {
		case s == nil:
			p.Ops = append(p.Ops, Op{Kind: Create, EgressIP: eip, IP: ip, Node: it.Node})
		case s.deleting():
			// The cloud is still releasing it; ask again once the object is gone.
		case s.owner != eip:
			p.Events = append(p.Events, Event{EgressIP: eip, Type: corev1.EventTypeWarning, Reason: ReasonAssignmentFailed,
				Message: fmt.Sprintf("egress IP: %s for object EgressIP: %s could not be created, err: %s", it.EgressIP, eip, ownedElsewhere(s))})
		case failedOnDeletedNode(s, nodeExists):
			msg, _ := s.failed()
			p.Ops = append(p.Ops, Op{Kind: Delete, EgressIP: eip, IP: ip})
			p.Events = append(p.Events, Event{EgressIP: eip, Type: corev1.EventTypeWarning, Reason: ReasonAssignmentRetry,
				Message: fmt.Sprintf("egress IP: %s previously failed on deleted node %s (reason: %s), will retry assignment", it.EgressIP, s.obj.Status.Node, msg)})
		case s.obj.Spec.Node != it.Node:
			p.Ops = append(p.Ops, Op{Kind: Move, EgressIP: eip, IP: ip, Node: it.Node})
		case s.confirmed():
			p.Status = append(p.Status, it)
		default:
			// Pending; upstream keeps a failed request as it is (the IP stays held on that
			// node) and says nothing: egressd says what the cloud answered.
			if msg, failed := s.failed(); failed {
				p.Events = append(p.Events, Event{EgressIP: eip, Type: corev1.EventTypeWarning, Reason: ReasonAssignmentFailed,
					Message: fmt.Sprintf("egress IP: %s for object EgressIP: %s was not assigned to node %s by the cloud: %s", it.EgressIP, eip, it.Node, msg)})
			}
		}
	}
	for _, s := range sorted(reqs) {
		if s.owner == eip && !s.deleting() && !wanted[s.ip] {
			p.Ops = append(p.Ops, Op{Kind: Delete, EgressIP: eip, IP: s.ip})
		}
	}
	return p
}

// Orphans are the requests of EgressIPs that no longer exist: their IPs are released.
func Orphans(eips []*ovnv1.EgressIP, cpics []*cloudv1.CloudPrivateIPConfig) []Op {
	names := make(map[string]bool, len(eips))
	for _, e := range eips {
		names[e.Name] = true
	}
	var ops []Op
	for _, s := range sorted(requests(cpics)) {
		if s.owner != "" && !names[s.owner] && !s.deleting() {
			ops = append(ops, Op{Kind: Delete, EgressIP: s.owner, IP: s.ip})
		}
	}
	return ops
}

func sorted(reqs map[netip.Addr]*state) []*state {
	out := make([]*state, 0, len(reqs))
	for _, s := range reqs {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *state) int { return a.ip.Compare(b.ip) })
	return out
}

// failedOnDeletedNode is upstream's retry case: the cloud failed the request on a node that
// no longer exists, so the request is deleted and made again.
func failedOnDeletedNode(s *state, nodeExists func(string) bool) bool {
	_, failed := s.failed()
	return failed && s.obj.Status.Node != "" && !nodeExists(s.obj.Status.Node)
}

func ownedElsewhere(s *state) string {
	if s.owner == "" {
		return fmt.Sprintf("CloudPrivateIPConfig %s exists and was not requested for an EgressIP", s.obj.Name)
	}
	return fmt.Sprintf("CloudPrivateIPConfig %s exists and was requested for EgressIP %s", s.obj.Name, s.owner)
}
