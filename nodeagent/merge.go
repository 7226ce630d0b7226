package nodeagent

import (
	"net/netip"
	"slices"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/egressfirewall"
	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/nodeagent/egressqos"
	"github.com/egressd/egressd/nodeagent/externalroute"
)

// parts are the features' compiled parts of the node state.
type parts struct {
	pods     []dataplane.Pod
	firewall egressfirewall.Part
	qos      egressqos.Part
	egressIP egressip.Part
	routes   externalroute.Part
}

// merge combines the parts into the node's desired state. It owns what crosses features: a
// pod's entry carries what every feature wants of it. It also returns the objects the state was
// compiled from that get a status entry, with their compile errors.
func merge(networks []netip.Prefix, p *parts, st *steering, mask uint32) (dataplane.State, map[dataplane.Origin]error) {
	objects := map[dataplane.Origin]error{}
	s := dataplane.State{Classifier: dataplane.ClassifierState{
		ClusterNetworks: networks,
		Firewalls:       p.firewall.Firewalls,
		QoS:             p.qos.QoS,
	}}
	paths := steeredPaths(p.egressIP.Steer, p.routes.Routes)
	slots := st.plan(paths, mask)
	marks := map[netip.Addr]uint32{}
	for _, path := range paths {
		if slot, ok := slots[path.origin]; ok {
			marks[path.podIP] = mark(slot, mask)
		}
	}
	for _, pod := range p.pods {
		pod.QoSRules = p.qos.PodRules[pod.Origin]
		s.Classifier.Pods = append(s.Classifier.Pods, byMark(pod, marks)...)
	}
	s.Classifier.SteerExempt = p.egressIP.Exempt
	s.Nftables.BackendDenies = p.firewall.BackendDenies
	for _, fw := range p.firewall.Firewalls {
		objects[fw.Origin] = fw.Err
		if fw.Err != nil {
			s.Nftables.KeepBackendDenies = append(s.Nftables.KeepBackendDenies, fw.Origin.Namespace)
		}
	}
	s.Nftables.BackendDSCP = p.qos.BackendDSCP
	for _, q := range p.qos.QoS {
		objects[q.Origin] = q.Err
		if q.Err != nil {
			s.Nftables.KeepBackendDSCP = append(s.Nftables.KeepBackendDSCP, q.Origin.Namespace)
		}
	}
	for _, r := range p.routes.Policies {
		objects[r.Origin] = r.Err
	}
	s.BFD = bfdPeers(p.routes.Routes)
	s.Addresses = p.egressIP.Addresses
	s.Routing = steeringRoutes(paths, slots, mask)
	s.Nftables.SteerMask = mask
	s.Nftables.SNAT = p.egressIP.SNAT
	s.Nftables.Exempt = p.egressIP.Exempt
	s.Nftables.Guarded = p.egressIP.Guarded
	for _, t := range s.Routing.Tables {
		for _, r := range t.Routes {
			for _, nh := range r.Nexthops {
				s.Nftables.SteerNexthops = append(s.Nftables.SteerNexthops, dataplane.SteerNexthop{Mark: mark(slots[t.Origin], mask), Nexthop: nh.Gateway})
			}
			if r.Via != nil {
				s.Nftables.SteerNexthops = append(s.Nftables.SteerNexthops, dataplane.SteerNexthop{Mark: mark(slots[t.Origin], mask), Nexthop: r.Via.Gateway})
			}
		}
	}
	return s, objects
}

// byMark gives a pod its steering mark. The classifier holds one entry per address, and a
// dual-stack pod may be steered in one family only (its object has an egress IP of the other
// family on this node, or none): such a pod becomes one entry per mark.
func byMark(pod dataplane.Pod, marks map[netip.Addr]uint32) []dataplane.Pod {
	var out []dataplane.Pod
	for _, ip := range pod.IPs {
		m := marks[ip]
		i := slices.IndexFunc(out, func(p dataplane.Pod) bool { return p.Mark == m })
		if i < 0 {
			part := pod
			part.IPs, part.Mark = nil, m
			out = append(out, part)
			i = len(out) - 1
		}
		out[i].IPs = append(out[i].IPs, ip)
	}
	return out
}
