package classifier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"sort"

	"github.com/egressd/egressd/bpf"
	"github.com/egressd/egressd/dataplane"
)

// fwSet is what one namespace's EgressFirewall put in the maps.
type fwSet struct {
	// fingerprint of the compiled rules the entries came from; 0 forces a rewrite.
	fingerprint uint64
	fw          map[bpf.FromPodLpmKey]bpf.FromPodFwEntry
	ports       map[bpf.FromPodPortKey]bpf.FromPodFwEntry
	texts       map[bpf.FromPodStatKey]bpf.FromPodRuleText
}

func newFwSet() *fwSet {
	return &fwSet{fw: map[bpf.FromPodLpmKey]bpf.FromPodFwEntry{}, ports: map[bpf.FromPodPortKey]bpf.FromPodFwEntry{}, texts: map[bpf.FromPodStatKey]bpf.FromPodRuleText{}}
}

type writtenTexts struct {
	from  *fwSet // the set they were written from; nil when adopted from a predecessor
	texts map[bpf.FromPodStatKey]bpf.FromPodRuleText
}

// firewalls is the firewall part of an Apply: per namespace, its id, its ACL log flags and the
// entries it wants (the written set when unchanged or failed).
type firewalls struct {
	ids     map[string]nsID // of the namespaces that have a firewall
	sets    map[nsID]*fwSet
	log     map[string]uint8 // by namespace
	logging aclLogging
}

// firewallsMemo is the firewall part computed from a list of firewalls, with the namespace ids
// it allocated and the failures it found.
type firewallsMemo struct {
	list       listKey
	fws        firewalls
	taken      map[uint32]string
	namespaces map[nsID]string
	failed     map[dataplane.Origin]error
	// names are the ids map's entries of namespaces (nameOf), made once per list: a thousand
	// of them made again at every sync were most of the classifier's time of a new pod's sync.
	names map[uint32]bpf.FromPodName
}

// namesOf are the ids map's entries of the namespaces of the list a (the firewalls' ids, as
// firewallsFor left them) was made from; the caller may change the map.
func (c *Classifier) namesOf(a *ids) map[uint32]bpf.FromPodName {
	m := c.fwMemo
	if m.names == nil {
		m.names = make(map[uint32]bpf.FromPodName, len(a.namespaces))
		for id, ns := range a.namespaces {
			m.names[uint32(id)] = nameOf(ns)
		}
	}
	return maps.Clone(m.names)
}

// listKey identifies a list of firewalls: by the version its producer gave it, else by its
// fingerprint.
type listKey struct{ version, fingerprint uint64 }

func keyOf(s *dataplane.ClassifierState) listKey {
	if s.FirewallsVersion != 0 {
		return listKey{version: s.FirewallsVersion}
	}
	return listKey{fingerprint: listFingerprint(s.Firewalls)}
}

// firewallsFor is firewallsOf, reused when the list is the same as at the last Apply (a sync
// for a new pod under a thousand firewalls) and the entries written from it are still those
// held (a failed write computes them again); it returns the list's key too. a must be fresh:
// the firewalls' namespaces take their ids first.
func (c *Classifier) firewallsFor(s *dataplane.ClassifierState, a *ids, failed map[dataplane.Origin]error) (fws firewalls, key listKey, reused bool) {
	key = keyOf(s)
	if m := c.fwMemo; m != nil && m.list == key && !c.firewallsChanged(m.fws.sets) {
		a.taken, a.namespaces = maps.Clone(m.taken), maps.Clone(m.namespaces)
		maps.Copy(failed, m.failed)
		return m.fws, key, true
	}
	own := map[dataplane.Origin]error{}
	fws = c.firewallsOf(s.Firewalls, a, own)
	maps.Copy(failed, own)
	c.fwMemo = &firewallsMemo{list: key, fws: fws, taken: maps.Clone(a.taken), namespaces: maps.Clone(a.namespaces), failed: own}
	return fws, key, false
}

// textsFrom runs sync (syncFirewallTexts, or nothing when nothing is to be written), and
// remembers when the texts are all written from the current memo's sets.
func (c *Classifier) textsFrom(sync func(map[nsID]*fwSet) error, sets map[nsID]*fwSet) error {
	err := sync(sets)
	c.textsOf = nil
	if err == nil {
		c.textsOf = c.fwMemo
	}
	return err
}

// firewallsOf computes the wanted firewall sets, reusing c's written sets where the rules are
// unchanged or failed (fail closed); failures go to failed.
func (c *Classifier) firewallsOf(fws []dataplane.Firewall, a *ids, failed map[dataplane.Origin]error) firewalls {
	n := len(fws)
	out := firewalls{ids: make(map[string]nsID, n), sets: make(map[nsID]*fwSet, n), log: make(map[string]uint8, n), logging: make(aclLogging, n)}
	for _, fw := range sortedFirewalls(fws) {
		id := a.namespace(fw.Origin.Namespace)
		out.ids[fw.Origin.Namespace] = id
		out.log[fw.Origin.Namespace] = logFlags(fw.Log)
		out.logging[id] = namespaceLog{fw.Origin.Namespace, fw.Log}
		old := c.fwSets[id]
		if err := fw.Err; err != nil {
			failed[fw.Origin] = err
			out.sets[id] = old // what is enforced stays (fail closed)
			continue
		}
		fp := fingerprint(fw.Rules)
		if old != nil && old.fingerprint == fp {
			out.sets[id] = old
			continue
		}
		set, err := firewallSet(id, fw.Rules)
		if err != nil {
			failed[fw.Origin] = err
			out.sets[id] = old
			continue
		}
		set.fingerprint = fp
		out.sets[id] = set
	}
	return out
}

func sortedFirewalls(fws []dataplane.Firewall) []dataplane.Firewall {
	out := append([]dataplane.Firewall(nil), fws...)
	sort.Slice(out, func(i, j int) bool { return out[i].Origin.Namespace < out[j].Origin.Namespace })
	return out
}

// firewallSet computes the entries of one namespace's firewall.
func firewallSet(id nsID, rules []dataplane.FirewallRule) (*fwSet, error) {
	set := newFwSet()
	trs := make([]Rule, len(rules))
	for i, r := range rules {
		if r.Index < 0 || r.Index > math.MaxUint16 || (i > 0 && r.Index <= rules[i-1].Index) {
			return nil, fmt.Errorf("rule index %d: indices must increase, within 0-%d", r.Index, math.MaxUint16)
		}
		trs[i] = Rule{Index: r.Index, Deny: r.Deny, Prefixes: r.Prefixes, Ports: r.Ports}
		set.texts[statKey(id, r.Index)] = ruleText(r.Text)
	}
	entries, ports := Table(trs)
	for p, e := range entries {
		v := fwEntry(e.Portless)
		v.Ports = b2u(e.PortsFirst)
		set.fw[lpmKey(id, p)] = v
	}
	for pp, d := range ports {
		set.ports[portKey(id, pp)] = fwEntry(d)
	}
	return set, nil
}

func fwEntry(d Decision) bpf.FromPodFwEntry {
	switch {
	case d.Index < 0:
		return bpf.FromPodFwEntry{Verdict: verdictPass}
	case d.Deny:
		return bpf.FromPodFwEntry{Rule: uint16(d.Index), Verdict: verdictDeny}
	default:
		return bpf.FromPodFwEntry{Rule: uint16(d.Index), Verdict: verdictAllow}
	}
}

// portKey is the egressd_fw_ports key of a (protocol, port) and prefix of a namespace.
func portKey(id nsID, pp PortPrefix) bpf.FromPodPortKey {
	l := lpmKey(id, pp.Prefix)
	return bpf.FromPodPortKey{Prefixlen: l.Prefixlen + 32, Id: l.Id, Proto: pp.Port.Protocol, Port: htons(pp.Port.Port), Ip: l.Ip}
}

// htons is a port in network byte order, as the program's little-endian u16 holds it.
func htons(p uint16) uint16 { return p<<8 | p>>8 }

// fingerprint identifies compiled rules within this process: equal rules give equal
// fingerprints. Every sync fingerprints every namespace's rules, so it uses maphash (AES-based,
// seeded once per process), not a byte-at-a-time hash.
func fingerprint(rules []dataplane.FirewallRule) uint64 {
	h := newHash()
	h.rules(rules)
	return h.Sum64() | 1 // never 0, which means "unknown"
}

// listFingerprint identifies a list of firewalls, in order: origins, failures, logging, rules.
func listFingerprint(list []dataplane.Firewall) uint64 {
	h := newHash()
	for _, fw := range list {
		h.str(string(fw.Origin.Kind))
		h.str(fw.Origin.Namespace)
		h.str(fw.Origin.Name)
		h.num(uint64(fw.Origin.Rule))
		h.str(fw.Log.Deny)
		h.str(fw.Log.Allow)
		if fw.Err != nil {
			h.str(fw.Err.Error())
		} else {
			h.num(0)
		}
		h.num(uint64(len(fw.Rules)))
		h.rules(fw.Rules)
	}
	return h.Sum64() | 1 // never 0, which means "unknown"
}

type hash struct {
	maphash.Hash
	b [8]byte
}

func newHash() *hash {
	h := &hash{}
	h.SetSeed(fingerprintSeed)
	return h
}

func (h *hash) num(v uint64) { binary.LittleEndian.PutUint64(h.b[:], v); h.Write(h.b[:]) }

func (h *hash) str(s string) {
	h.num(uint64(len(s)))
	h.WriteString(s)
}

func (h *hash) rules(rules []dataplane.FirewallRule) {
	for _, r := range rules {
		h.num(uint64(r.Index)<<1 | uint64(b2u(r.Deny)))
		h.str(r.Text)
		h.num(uint64(len(r.Prefixes)))
		for _, p := range r.Prefixes {
			a := p.Addr().As16()
			h.Write(a[:])
			h.num(uint64(p.Bits()))
		}
		h.num(uint64(len(r.Ports)))
		for _, p := range r.Ports {
			h.num(uint64(p.Protocol)<<16 | uint64(p.Port))
		}
	}
}

var fingerprintSeed = maphash.MakeSeed()

// changed says whether the wanted sets differ from the written ones.
func (c *Classifier) firewallsChanged(want map[nsID]*fwSet) bool {
	for id, set := range want {
		if c.fwSets[id] != set {
			return true
		}
	}
	for id := range c.fwSets {
		if _, kept := want[id]; !kept {
			return true
		}
	}
	return false
}

// syncFirewalls writes the namespaces whose entries changed and removes those of namespaces
// gone, leaving the others untouched.
func (c *Classifier) syncFirewalls(want map[nsID]*fwSet) error {
	var errs []error
	for id, set := range want {
		old := c.fwSets[id]
		if set == old {
			continue
		}
		if old == nil {
			old = newFwSet()
		}
		err := errors.Join(
			syncMap(c.objs.EgressdFwPorts, old.ports, set.ports),
			syncMap(c.objs.EgressdFw, old.fw, set.fw))
		if err != nil {
			old.fingerprint = 0 // partly rewritten: rewrite in full next time
			c.fwSets[id] = old
			errs = append(errs, err)
			continue
		}
		c.fwSets[id] = set
	}
	for id, old := range c.fwSets {
		if _, ok := want[id]; ok {
			continue
		}
		empty := newFwSet()
		err := errors.Join(
			syncMap(c.objs.EgressdFw, old.fw, empty.fw),
			syncMap(c.objs.EgressdFwPorts, old.ports, empty.ports))
		if err != nil {
			old.fingerprint = 0
			errs = append(errs, err)
			continue
		}
		delete(c.fwSets, id)
	}
	return errors.Join(errs...)
}

// nextGeneration, when the firewall entries changed, increments egressd_fw_gen, which makes
// every decision the program cached before stale. It runs after the entries are written, and
// also after a partial write.
func (c *Classifier) nextGeneration(changed bool) error {
	if !changed {
		return nil
	}
	var zero uint32
	gen := c.gen + 1
	if err := c.objs.EgressdFwGen.Put(&zero, &gen); err != nil {
		return fmt.Errorf("%s: update: %w", c.objs.EgressdFwGen, err)
	}
	c.gen = gen
	return nil
}

// syncFirewallTexts writes the rule texts of the namespaces whose set changed and removes those
// of namespaces gone.
func (c *Classifier) syncFirewallTexts(want map[nsID]*fwSet) error {
	var errs []error
	for id, set := range want {
		w := c.fwTexts[id]
		if set == nil || (w != nil && w.from == set) {
			continue
		}
		if w == nil {
			w = &writtenTexts{texts: map[bpf.FromPodStatKey]bpf.FromPodRuleText{}}
			c.fwTexts[id] = w
		}
		w.from = nil // until fully written
		if err := syncMap(c.objs.EgressdFwRules, w.texts, set.texts); err != nil {
			errs = append(errs, err)
			continue
		}
		w.from = set
	}
	for id, w := range c.fwTexts {
		if want[id] != nil {
			continue
		}
		if err := syncMap(c.objs.EgressdFwRules, w.texts, nil); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(c.fwTexts, id)
	}
	return errors.Join(errs...)
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
