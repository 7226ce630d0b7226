// Package egressservice compiles EgressServices (k8s.ovn.org/v1) into this node's part of the
// state, and holds the leader's host election (controller.go).
//
// As upstream: an EgressService applies when the Service of the same name is a LoadBalancer
// with an ingress IP. With sourceIPBy LoadBalancerIP (or empty) and status.host naming a node,
// the cluster-networked endpoints of the Service leave the cluster with the LB IP of their
// family: the host node SNATs them (local endpoints and those steered to it from other nodes),
// the other nodes steer their local endpoints to the host's primary address. EgressService
// wins over EgressIP for a pod that both serve. With spec.network, `ip rule from <endpoint or
// ClusterIP> lookup <network>` on the host node (every endpoint) or, for host "ALL"
// (sourceIPBy Network), on every node for its local endpoints; no SNAT then.
package egressservice

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// Upstream's reserved values of status.host.
const (
	NoHost     = ""    // no node allocated
	NoSNATHost = "ALL" // sourceIPBy Network: every node, no SNAT
)

// Part is what EgressService adds to this node's state.
type Part struct {
	// SNAT rewrites the source of every endpoint (local or steered here) of the services this
	// node hosts to the LB IP of its family, for destinations outside Exempt.
	SNAT []dataplane.SNAT
	// Steer sends local endpoints of services hosted on another node to the host's primary
	// address (same shape as EgressIP's steering: the merge gives each service a path).
	Steer []cluster.Steer
	// Guarded are every served endpoint address (any node): never leaves un-SNATed.
	Guarded []netip.Addr
	// Served are the endpoint addresses an EgressService serves with an LB IP: EgressIP does
	// not SNAT nor steer them (EgressService has priority, as upstream's reroute 101 > 100).
	Served []netip.Addr
	// Exempt are the destinations never SNATed nor steered: cluster networks and node
	// addresses, as EgressIP.
	Exempt []netip.Prefix
	// Rules are the spec.network rules: `ip rule from Src lookup Table`.
	Rules []NetworkRule
}

// NetworkRule sends what leaves with source Src through the routing table Network (a table
// number, a name of /etc/iproute2/rt_tables, or a VRF device: dataplane/routing resolves it).
type NetworkRule struct {
	Origin  dataplane.Origin
	Src     netip.Addr
	Network string
}

// Service is one EgressService with what its compile needs.
type service struct {
	es        *ovnv1.EgressService
	svc       *corev1.Service
	lb4, lb6  netip.Addr
	endpoints []endpoint
}

type endpoint struct {
	ip   netip.Addr
	node string
}

// Origin of an EgressService's elements.
func Origin(namespace, name string) dataplane.Origin {
	return dataplane.Origin{Kind: cluster.KindEgressService, Namespace: namespace, Name: name}
}

// Compile computes this node's part from the EgressServices, their Services and EndpointSlices,
// and status.host (the leader's election).
func Compile(in *cluster.Input) (Part, error) {
	var part Part
	nodes, err := in.Snap.Nodes.List(labels.Everything())
	if err != nil {
		return part, err
	}
	primary, exempt := cluster.NodeNetworks(in, nodes)
	part.Exempt = append(part.Exempt, exempt...)
	services, err := Services(in)
	if err != nil {
		return part, err
	}
	for _, s := range services {
		o := Origin(s.es.Namespace, s.es.Name)
		host := s.es.Status.Host
		if host == NoHost || (host != NoSNATHost && s.es.Spec.SourceIPBy == ovnv1.SourceIPNetwork) {
			continue
		}
		if s.es.Spec.Network != "" && (host == in.Node || host == NoSNATHost) {
			for _, ep := range s.endpoints {
				if host == in.Node || ep.node == in.Node {
					part.Rules = append(part.Rules, NetworkRule{Origin: o, Src: ep.ip, Network: s.es.Spec.Network})
				}
			}
			for _, c := range s.svc.Spec.ClusterIPs {
				if a, err := netip.ParseAddr(c); err == nil {
					part.Rules = append(part.Rules, NetworkRule{Origin: o, Src: a, Network: s.es.Spec.Network})
				}
			}
		}
		if host == NoSNATHost {
			continue // sourceIPBy Network: no SNAT, no steering
		}
		for _, ep := range s.endpoints {
			lb, via := s.lb4, primary[host].V4.Addr()
			if ep.ip.Is6() {
				lb, via = s.lb6, primary[host].V6.Addr()
			}
			if !lb.IsValid() {
				continue // no LB IP of the family: the normal path
			}
			part.Served = append(part.Served, ep.ip)
			part.Guarded = append(part.Guarded, ep.ip)
			switch {
			case host == in.Node:
				part.SNAT = append(part.SNAT, dataplane.SNAT{Origin: o, Pod: ep.ip, To: lb})
			case ep.node == in.Node:
				st := cluster.Steer{Origin: o, PodIP: ep.ip, Pod: podOf(in, ep.ip)}
				if via.IsValid() {
					st.Via = []netip.Addr{via}
				}
				part.Steer = append(part.Steer, st)
			}
		}
	}
	slices.SortFunc(part.Exempt, netip.Prefix.Compare)
	part.Exempt = slices.Compact(part.Exempt)
	slices.SortFunc(part.Guarded, netip.Addr.Compare)
	part.Guarded = slices.Compact(part.Guarded)
	slices.SortFunc(part.Served, netip.Addr.Compare)
	part.Served = slices.Compact(part.Served)
	slices.SortFunc(part.SNAT, func(a, b dataplane.SNAT) int { return a.Pod.Compare(b.Pod) })
	slices.SortFunc(part.Steer, func(a, b cluster.Steer) int { return a.PodIP.Compare(b.PodIP) })
	slices.SortStableFunc(part.Rules, func(a, b NetworkRule) int { return a.Src.Compare(b.Src) })
	return part, nil
}

// podOf names the local pod holding ip, for failure reports.
func podOf(in *cluster.Input, ip netip.Addr) dataplane.Origin {
	for _, p := range in.Pods {
		if slices.Contains(p.IPs, ip) {
			return p.Origin
		}
	}
	return dataplane.Origin{}
}

// Services are the EgressServices whose Service is a LoadBalancer with an ingress IP, with their
// LB IPs (the last of each family, as upstream) and cluster-networked endpoints.
func Services(in *cluster.Input) ([]service, error) {
	ess, err := in.Snap.EgressServices.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ess, func(a, b *ovnv1.EgressService) int {
		if a.Namespace != b.Namespace {
			if a.Namespace < b.Namespace {
				return -1
			}
			return 1
		}
		if a.Name < b.Name {
			return -1
		} else if a.Name > b.Name {
			return 1
		}
		return 0
	})
	var out []service
	for _, es := range ess {
		svc, err := in.Snap.Services.Services(es.Namespace).Get(es.Name)
		if errors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		s := service{es: es, svc: svc}
		var ok bool
		s.lb4, s.lb6, ok = LoadBalancerIPs(svc)
		if !ok {
			continue
		}
		s.endpoints, err = Endpoints(in, svc)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// LoadBalancerIPs are the ingress IPs of a LoadBalancer Service, the last of each family (as
// upstream); ok is false unless the Service is a LoadBalancer with at least one ingress IP.
func LoadBalancerIPs(svc *corev1.Service) (v4, v6 netip.Addr, ok bool) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return v4, v6, false
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		a, err := netip.ParseAddr(ing.IP)
		if err != nil {
			continue
		}
		if a.Is4() {
			v4 = a
		} else {
			v6 = a
		}
		ok = true
	}
	return v4, v6, ok
}

// Endpoints are the cluster-networked endpoints of a Service (its EndpointSlices, FQDN slices
// ignored, host-network endpoints - outside the cluster networks - left out), deduplicated.
func Endpoints(in *cluster.Input, svc *corev1.Service) ([]endpoint, error) {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name})
	slcs, err := in.Snap.EndpointSlices.EndpointSlices(svc.Namespace).List(sel)
	if err != nil {
		return nil, fmt.Errorf("endpoint slices of %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	seen := map[netip.Addr]bool{}
	var out []endpoint
	for _, sl := range slcs {
		if sl.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		for _, ep := range sl.Endpoints {
			node := ""
			if ep.NodeName != nil {
				node = *ep.NodeName
			}
			for _, s := range ep.Addresses {
				a, err := netip.ParseAddr(s)
				if err != nil || !in.InNetworks(a) || seen[a] {
					continue
				}
				seen[a] = true
				out = append(out, endpoint{ip: a, node: node})
			}
		}
	}
	slices.SortFunc(out, func(a, b endpoint) int { return a.ip.Compare(b.ip) })
	return out, nil
}
