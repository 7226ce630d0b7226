package classifier

import (
	"github.com/cilium/ebpf"

	"github.com/egressd/egressd/bpf"
	"github.com/egressd/egressd/dataplane"
)

// RuleRef names a rule of a namespace's policy, for counters.
type RuleRef struct {
	Namespace string
	Rule      int
}

// Counters of one rule, summed over CPUs.
type Counters struct {
	Packets, Bytes uint64
}

// FirewallCounters reads the per-rule counters of EgressFirewall rules that matched.
func (c *Classifier) FirewallCounters() (map[RuleRef]Counters, error) {
	return c.counters(c.objs.EgressdFwStats)
}

// QoSCounters reads the per-rule counters of EgressQoS rules that marked packets.
func (c *Classifier) QoSCounters() (map[RuleRef]Counters, error) {
	return c.counters(c.objs.EgressdQosStats)
}

func (c *Classifier) counters(m *ebpf.Map) (map[RuleRef]Counters, error) {
	out := map[RuleRef]Counters{}
	var names map[nsID]string
	if p := c.names.Load(); p != nil {
		names = *p
	}
	var k bpf.FromPodStatKey
	var per []bpf.FromPodCounters
	it := m.Iterate()
	for it.Next(&k, &per) {
		ns, ok := names[nsID(k.NsId)]
		if !ok {
			continue // a namespace gone since
		}
		ref := RuleRef{Namespace: ns, Rule: int(k.Rule)}
		sum := out[ref]
		for _, v := range per {
			sum.Packets += v.Packets
			sum.Bytes += v.Bytes
		}
		out[ref] = sum
	}
	return out, it.Err()
}

// FragmentStats counts what the firewall did with fragments of datagrams from firewalled pods
// (egressd_fw_frag_stats), summed over CPUs.
type FragmentStats struct {
	// Tracked: first fragments whose verdict was remembered for the rest of their datagram.
	Tracked uint64
	// Followed: later fragments judged by their datagram's first.
	Followed uint64
	// Unmatched: later fragments whose first was not seen (lost, reordered, expired, evicted),
	// judged by their destination alone, since no rule restricted to ports could decide them.
	Unmatched uint64
	// Dropped: later fragments whose first was not seen, dropped because a rule restricted to
	// ports could decide them.
	Dropped uint64
}

// FragmentCounters reads the fragment counters.
func (c *Classifier) FragmentCounters() (FragmentStats, error) {
	var out FragmentStats
	err := sumStats(c.objs.EgressdFwFragStats, &out.Tracked, &out.Followed, &out.Unmatched, &out.Dropped)
	return out, err
}

// UnparsedStats counts the packets from firewalled pods whose transport header the classifier
// did not read (more IPv6 extension headers than it walks, or a header cut short), summed over
// CPUs (egressd_fw_unparsed).
type UnparsedStats struct {
	// Judged: by their destination alone, since no rule restricted to ports could decide them.
	Judged uint64
	// Dropped: a rule restricted to ports could decide them (fail closed).
	Dropped uint64
}

// UnparsedCounters reads the counters of packets whose transport header was not read.
func (c *Classifier) UnparsedCounters() (UnparsedStats, error) {
	var out UnparsedStats
	err := sumStats(c.objs.EgressdFwUnparsed, &out.Judged, &out.Dropped)
	return out, err
}

// SpoofStats counts the packets dropped on guarded interfaces for a forged source, summed over
// CPUs (egressd_spoofed).
type SpoofStats struct {
	// Unknown: a source no pod of the node has.
	Unknown uint64
	// OtherPod: the source of a pod behind another interface.
	OtherPod uint64
}

// SpoofCounters reads the counters of forged sources.
func (c *Classifier) SpoofCounters() (SpoofStats, error) {
	var out SpoofStats
	err := sumStats(c.objs.EgressdSpoofed, &out.Unknown, &out.OtherPod)
	return out, err
}

// sumStats reads entries 0, 1, ... of a per-CPU array of counters into v, summed over CPUs.
func sumStats(m *ebpf.Map, v ...*uint64) error {
	for i, p := range v {
		var per []uint64
		if err := m.Lookup(uint32(i), &per); err != nil {
			return err
		}
		for _, n := range per {
			*p += n
		}
	}
	return nil
}

// recordRules remembers what the metrics label rules with. A policy that failed keeps the rules
// it had, and so do its labels. list identifies s.Firewalls: the same list as last time labels
// its rules as last time.
func (c *Classifier) recordRules(s *dataplane.ClassifierState, list listKey, failed map[dataplane.Origin]error) {
	c.info.mu.Lock()
	defer c.info.mu.Unlock()
	keepNS := map[string]bool{}
	for _, fw := range s.Firewalls {
		if failed[fw.Origin] != nil {
			keepNS[fw.Origin.Namespace] = true
		}
	}
	actions := c.info.fwAction
	if len(keepNS) > 0 || list != c.info.actionsOf || actions == nil {
		// Sized as last time: rebuilt, grown from empty it would rehash many times.
		actions = make(map[RuleRef]string, len(c.info.fwAction))
		for _, fw := range s.Firewalls {
			if keepNS[fw.Origin.Namespace] {
				continue
			}
			for _, r := range fw.Rules {
				a := "Allow"
				if r.Deny {
					a = "Deny"
				}
				actions[RuleRef{fw.Origin.Namespace, r.Index}] = a
			}
		}
		for ref, a := range c.info.fwAction {
			if keepNS[ref.Namespace] {
				actions[ref] = a
			}
		}
	}
	c.info.actionsOf = listKey{}
	if len(keepNS) == 0 {
		c.info.actionsOf = list
	}
	dscps := make(map[RuleRef]uint8, len(c.info.qosDSCP))
	for _, q := range s.QoS {
		for _, r := range q.Rules {
			dscps[RuleRef{q.Origin.Namespace, r.Index}] = r.DSCP
		}
	}
	c.info.fwAction, c.info.qosDSCP, c.info.firewalls = actions, dscps, len(s.Firewalls)
}
