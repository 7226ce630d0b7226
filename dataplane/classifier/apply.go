package classifier

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"

	"github.com/egressd/egressd/bpf"
	"github.com/egressd/egressd/dataplane"
)

// linkScoped destinations never leave the link, so no egress policy applies to them; IPv6
// neighbour discovery (to link-local and solicited-node multicast addresses) must always pass.
var linkScoped = []netip.Prefix{netip.MustParsePrefix("fe80::/10"), netip.MustParsePrefix("ff00::/8")}

// Apply writes the classifier's part of s, returning failures per object. A policy that failed
// to compile or does not fit keeps every entry it had (fail closed). facing is the index of the
// host interface that faces each pod address (where its packets must come in, see Guard), port
// that of a bridged pod's bridge port (0 or absent: unknown).
func (c *Classifier) Apply(s *dataplane.ClassifierState, facing, port map[netip.Addr]int) map[dataplane.Origin]error {
	failed := map[dataplane.Origin]error{}
	want := newContent()
	want.pods = make(map[bpf.FromPodAddr]bpf.FromPodPodInfo, len(s.Pods))
	a := newIDs()
	fws, list, reused := c.firewallsFor(s, a, failed)
	want.ids = c.namesOf(a)
	keep := c.pods(s, a, fws, facing, port, &want, failed) // QoS classes whose previous entries stay
	var qosTexts []qosText
	for _, q := range s.QoS {
		id := a.namespace(q.Origin.Namespace)
		for _, r := range q.Rules {
			qosTexts = append(qosTexts, qosText{id, r.Index, r.Text})
		}
	}
	if !c.from.qosRules.unchanged(qosTexts) {
		for _, t := range qosTexts {
			want.qosRules[statKey(t.id, t.index)] = ruleText(t.text)
		}
	}
	for id, ns := range a.namespaces { // the QoS namespaces without a firewall
		if _, ok := want.ids[uint32(id)]; !ok {
			want.ids[uint32(id)] = nameOf(ns)
		}
	}
	for id, ns := range a.classes {
		want.ids[uint32(id)] = nameOf(ns)
	}
	clusterChanged := !c.from.cluster.unchanged(s.ClusterNetworks)
	if clusterChanged {
		for _, p := range append(linkScoped, s.ClusterNetworks...) {
			want.cluster[prefixKey(p)] = 1
		}
	}
	frontendsChanged := !c.from.frontends.unchanged(s.Frontends)
	if frontendsChanged {
		for _, f := range s.Frontends {
			want.frontends[frontendKey(f)] = 1
		}
	}
	// Link-scoped destinations are never steered either (their routes are in the main table).
	if !c.from.steerExempt.unchanged(s.SteerExempt) {
		for _, p := range append(linkScoped, s.SteerExempt...) {
			want.steerExempt[prefixKey(p)] = 1
		}
	}
	c.names.Store(&a.namespaces)
	c.logging.Store(&fws.logging)
	c.recordRules(s, list, failed)
	// QoS entries of classes that failed stay as written.
	keepFailed(c.written.qos, want.qos, keep, lpmID)
	// Cached decisions go stale when what they were decided from changes.
	// Reused sets are the written ones (firewallsFor checked): nothing of them to write, nor of
	// their texts once written from them.
	fwChanged := (clusterChanged && !maps.Equal(c.written.cluster, want.cluster)) ||
		(frontendsChanged && !maps.Equal(c.written.frontends, want.frontends)) || (!reused && c.firewallsChanged(fws.sets))
	syncSets, syncTexts := c.syncFirewalls, c.syncFirewallTexts
	if reused {
		syncSets = func(map[nsID]*fwSet) error { return nil }
		if c.textsOf == c.fwMemo {
			syncTexts = syncSets
		}
	}
	// Adds and changes before removals: every destination sees either the old or the new
	// verdict, never a mixture (a removed prefix falls back to an already updated shorter one).
	errs := []error{
		syncSets(fws.sets),
		syncMap(c.objs.EgressdQos, c.written.qos, want.qos),
		c.from.cluster.write(s.ClusterNetworks, func() error {
			return syncMap(c.objs.EgressdCluster, c.written.cluster, want.cluster)
		}),
		c.from.frontends.write(s.Frontends, func() error {
			return syncMap(c.objs.EgressdFrontends, c.written.frontends, want.frontends)
		}),
		// Exemptions before the marks of new pods, so that none is steered where it must not be.
		c.from.steerExempt.write(s.SteerExempt, func() error {
			return syncMap(c.objs.EgressdSteerExempt, c.written.steerExempt, want.steerExempt)
		}),
		syncMap(c.objs.EgressdPods, c.written.pods, want.pods),
		c.nextGeneration(fwChanged),
		c.textsFrom(syncTexts, fws.sets),
		syncMap(c.objs.EgressdIds, c.written.ids, want.ids),
		c.from.qosRules.write(qosTexts, func() error {
			return syncMap(c.objs.EgressdQosRules, c.written.qosRules, want.qosRules)
		}),
	}
	if err := errors.Join(errs...); err != nil {
		for _, fw := range s.Firewalls {
			if failed[fw.Origin] == nil {
				failed[fw.Origin] = fmt.Errorf("program classifier maps: %w", err)
			}
		}
	}
	return failed
}

// pods computes the entries of the local pods (and the QoS entries of the classes they
// use) into want; it returns the classes whose EgressQoS failed, whose entries stay.
func (c *Classifier) pods(s *dataplane.ClassifierState, a *ids, fws firewalls, facing, port map[netip.Addr]int, want *content, failed map[dataplane.Origin]error) map[qosClass]bool {
	keep := map[qosClass]bool{}
	qosByNS := map[string]dataplane.QoS{}
	for _, q := range s.QoS {
		qosByNS[q.Origin.Namespace] = q
	}
	done := map[qosClass]bool{}
	for _, p := range s.Pods {
		ns := p.Origin.Namespace
		info := bpf.FromPodPodInfo{NsId: uint32(fws.ids[ns]), Log: fws.log[ns]}
		if q, ok := qosByNS[ns]; ok && len(p.QoSRules) > 0 {
			class := a.class(ns, p.QoSRules)
			if !done[class] {
				done[class] = true
				if q.Err != nil {
					failed[q.Origin] = q.Err
					keep[class] = true
				} else if err := qosEntries(class, a.namespace(ns), selected(q.Rules, p.QoSRules), want); err != nil {
					failed[q.Origin] = err
					keep[class] = true
				}
			}
			info.QosClass = uint32(class)
		}
		markErr := c.checkMark(p.Mark)
		if markErr != nil {
			failed[p.Origin] = markErr
		} else {
			info.Mark, info.Spread = p.Mark, p.Spread
		}
		for _, ip := range p.IPs {
			k := addrOf(ip)
			if markErr != nil { // the mark it had stays (fail closed)
				info.Mark = c.written.pods[k].Mark
			}
			info.Ifindex, info.Port = uint32(facing[ip]), uint32(port[ip])
			want.pods[k] = info
		}
	}
	return keep
}

// Guard makes the interfaces of ifindexes, and only those, drop a packet whose source is not an
// address of a pod behind them (bpf/src/lib/guard.h): the interfaces that face pods alone. ports
// are the bridge ports of the pods written with one (Apply): there, FromPort lets only that
// pod's addresses pass.
func (c *Classifier) Guard(ifindexes, ports []int) error {
	return errors.Join(syncMap(c.objs.EgressdGuarded, c.written.guarded, set(ifindexes)),
		syncMap(c.objs.EgressdPorts, c.written.ports, set(ports)))
}

func set(ifindexes []int) map[uint32]uint8 {
	out := make(map[uint32]uint8, len(ifindexes))
	for _, i := range ifindexes {
		out[uint32(i)] = 1
	}
	return out
}

// WrittenPort is the bridge port the pod address ip was last written with (0: none): what a
// restarted agent knows of the ports of pods whose CNI ADD it did not see.
func (c *Classifier) WrittenPort(ip netip.Addr) int {
	return int(c.written.pods[addrOf(ip)].Port)
}
