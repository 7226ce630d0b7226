package egressservice

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// LabelPrefix is the prefix of the node label naming the node an EgressService is on:
// `egress-service.k8s.ovn.org/<namespace>-<name>: ""` (for LB providers such as MetalLB).
const LabelPrefix = "egress-service.k8s.ovn.org"

// NodeLabel is the label of the node elected for an EgressService, as upstream.
func NodeLabel(namespace, name string) string { return LabelPrefix + "/" + namespace + "-" + name }

// Candidate is a node as the election sees it.
type Candidate struct {
	Name      string
	Labels    map[string]string
	Ready     bool
	Reachable bool
}

// Request is one EgressService to place.
type Request struct {
	Namespace, Name string
	// Current is its status.host.
	Current string
	// Network: sourceIPBy Network with its Service present, host "ALL" (upstream writes it
	// before looking at the Service's type or ingress IPs; the agents apply nothing until the
	// Service is a LoadBalancer with an ingress IP, as upstream's nodes).
	Network bool
	// Unusable says why its Service cannot be used (ReasonNoLoadBalancer, ReasonNoIngressIP);
	// "" for a LoadBalancer with an ingress IP.
	Unusable string
	// EndpointNodes are the nodes of its cluster-networked endpoints (none: not allocated).
	EndpointNodes []string
	// Selector is spec.nodeSelector, restricted to EndpointNodes for ETP=Local (nil: invalid).
	Selector labels.Selector
}

// Result of an election for one EgressService.
type Result struct {
	Namespace, Name string
	Host            string
	// Reason says why Host is "" for a service that wanted one, or why the Service of a host
	// "ALL" is not used yet.
	Reason string
}

// Election reasons (upstream logs them; egressd also records them as Warning events).
const (
	ReasonNoLoadBalancer = "NoLoadBalancer"
	ReasonNoIngressIP    = "NoIngressIP"
	ReasonNoEndpoints    = "NoEndpoints"
	ReasonNoNode         = "NoMatchingNodeFound"
	ReasonBadSelector    = "InvalidNodeSelector"
)

// Elect places every request as upstream's cluster manager does: "ALL" for sourceIPBy Network;
// "" without a LoadBalancer ingress IP; "" without cluster-networked endpoints; a current host that
// is Ready, reachable and still selected keeps its services; others go to an eligible node with no
// allocation, else the least loaded one (ties by name). Requests are placed in namespace/name
// order so the outcome does not depend on listing order.
func Elect(reqs []Request, nodes []Candidate) []Result {
	reqs = slices.Clone(reqs)
	slices.SortFunc(reqs, func(a, b Request) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	nodes = slices.Clone(nodes)
	slices.SortFunc(nodes, func(a, b Candidate) int { return strings.Compare(a.Name, b.Name) })
	eligible := func(r *Request, n *Candidate) bool {
		return n.Ready && n.Reachable && r.Selector != nil && r.Selector.Matches(labels.Set(n.Labels))
	}
	load := map[string]int{}
	out := make([]Result, len(reqs))
	pending := []int{}
	for i := range reqs {
		r := &reqs[i]
		out[i] = Result{Namespace: r.Namespace, Name: r.Name}
		switch {
		case r.Network:
			out[i].Host, out[i].Reason = NoSNATHost, r.Unusable
		case r.Unusable != "":
			out[i].Reason = r.Unusable
		case len(r.EndpointNodes) == 0:
			out[i].Reason = ReasonNoEndpoints
		case r.Selector == nil:
			out[i].Reason = ReasonBadSelector
		default:
			j := slices.IndexFunc(nodes, func(n Candidate) bool { return n.Name == r.Current })
			if j >= 0 && eligible(r, &nodes[j]) {
				out[i].Host = r.Current
				load[r.Current]++
			} else {
				pending = append(pending, i)
			}
		}
	}
	for _, i := range pending {
		r := &reqs[i]
		best := ""
		for j := range nodes {
			n := &nodes[j]
			if eligible(r, n) && (best == "" || load[n.Name] < load[best]) {
				best = n.Name
			}
		}
		if best == "" {
			out[i].Reason = ReasonNoNode
			continue
		}
		out[i].Host = best
		load[best]++
	}
	return out
}

// RequestFor builds the election request of an EgressService from the snapshot's Service
// (nil when missing) and its endpoints.
func RequestFor(es *ovnv1.EgressService, svc *corev1.Service, eps []endpoint) Request {
	r := Request{Namespace: es.Namespace, Name: es.Name, Current: es.Status.Host,
		Network: svc != nil && es.Spec.SourceIPBy == ovnv1.SourceIPNetwork}
	if svc == nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		r.Unusable = ReasonNoLoadBalancer
		return r
	}
	if _, _, ok := LoadBalancerIPs(svc); !ok {
		r.Unusable = ReasonNoIngressIP
		return r
	}
	for _, ep := range eps {
		if ep.node != "" && !slices.Contains(r.EndpointNodes, ep.node) {
			r.EndpointNodes = append(r.EndpointNodes, ep.node)
		}
	}
	slices.Sort(r.EndpointNodes)
	sel := *es.Spec.NodeSelector.DeepCopy()
	if len(r.EndpointNodes) != 0 && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: corev1.LabelHostname, Operator: metav1.LabelSelectorOpIn, Values: r.EndpointNodes})
	}
	if s, err := metav1.LabelSelectorAsSelector(&sel); err == nil {
		r.Selector = s
	}
	return r
}
