package cniserver

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// A pod's node steers the pod's first packet to its egress node at once, but the egress node
// learns the pod's address from the API only after the kubelet has posted it. The pod's agent
// therefore announces a new pod to its egress nodes' agents (nodeagent/podannounce) before
// answering the ADD; here the receiving store holds the announcement, which stands in for the
// Pod object's addresses until the object shows them.

// remoteState is what the store knows of another node's pod its agent announced.
type remoteState struct {
	announced bool
	// included: a sync compiled from the announcement (Overlay); the next Applied decides it.
	included bool
	// served: the applied state SNATs the pod on this node (an address of it: an EgressIP may
	// have egress IPs of one family only).
	served bool
}

// remoteTTL bounds how long an announcement stands in for a Pod object that does not show its
// addresses.
const remoteTTL = time.Minute

// AnnounceRemote takes another node's new pod (its Pod object, as this node's informer holds
// it, and the addresses the pod's CNI gave it) and returns once a sync that included it was
// applied, reporting whether this node SNATs the pod (it is an egress node serving it).
func (s *Store) AnnounceRemote(ctx context.Context, pod *watchers.Pod, ips []netip.Addr) (bool, error) {
	e := s.announce("remote:"+pod.Namespace+"/"+pod.Name, pod, ips, nil, true)
	select {
	case <-e.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		return e.remote.served, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// includeRemotes marks the remote announcements a sync compiles from and drops those no longer
// needed: the pod is gone (or another pod of that name), or, once decided, its Pod object shows
// the addresses or the announcement is older than remoteTTL. It returns the keys of the remote
// pods included.
func (s *Store) includeRemotes(snap *watchers.Snapshot, latest map[podKey]*entry) map[podKey]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[podKey]bool{}
	for k, e := range latest {
		if !e.remote.announced {
			continue
		}
		obj, err := snap.Pods.Pods(k.namespace).Get(k.name)
		gone := err != nil || (e.pod.UID != "" && obj.UID != e.pod.UID)
		known := err == nil && containsAll(statusIPs(obj), e.ips)
		if gone || (!e.programmed.IsZero() && (known || time.Since(e.added) > remoteTTL)) {
			delete(s.byID, e.id)
			s.changes++
			continue
		}
		e.remote.included = true
		out[k] = true
	}
	return out
}

// appliedRemote decides a remote announcement once a sync that included it was applied.
func appliedRemote(e *entry, snatted map[netip.Addr]bool, now time.Time) {
	if !e.remote.included {
		return
	}
	e.remote.served = slices.ContainsFunc(e.ips, func(ip netip.Addr) bool { return snatted[ip] })
	e.programmed = now
	close(e.done)
}

// snatted are the pod addresses the state SNATs on this node.
func snatted(state *dataplane.State) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, n := range state.Nftables.SNAT {
		out[n.Pod] = true
	}
	return out
}

// steerTargets are, per local pod, the egress nodes the state steers its EgressIP traffic to
// (the gateways of the tables its marks select).
func steerTargets(state *dataplane.State) map[podKey][]netip.Addr {
	gateways := map[int][]netip.Addr{}
	for _, t := range state.Routing.Tables {
		if t.Origin.Kind != cluster.KindEgressIP {
			continue
		}
		for _, r := range t.Routes {
			if r.Via != nil {
				gateways[t.ID] = append(gateways[t.ID], r.Via.Gateway)
			}
			for _, nh := range r.Nexthops {
				gateways[t.ID] = append(gateways[t.ID], nh.Gateway)
			}
		}
	}
	tables := map[uint32][]int{}
	for _, r := range state.Routing.Rules {
		if r.Network == "" && r.Mark != 0 {
			tables[r.Mark] = append(tables[r.Mark], r.Table)
		}
	}
	out := map[podKey][]netip.Addr{}
	for _, p := range state.Classifier.Pods {
		if p.Mark == 0 || p.Origin.Kind != cluster.KindPod {
			continue
		}
		k := podKey{p.Origin.Namespace, p.Origin.Name}
		for _, id := range tables[p.Mark] {
			for _, gw := range gateways[id] {
				if gw.IsValid() && !containsAll(out[k], []netip.Addr{gw}) {
					out[k] = append(out[k], gw)
				}
			}
		}
	}
	return out
}

func statusIPs(pod *watchers.Pod) []netip.Addr {
	var out []netip.Addr
	for _, ip := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a)
		}
	}
	return out
}
