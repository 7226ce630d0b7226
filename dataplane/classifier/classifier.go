package classifier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/egressd/egressd/bpf"
	"github.com/egressd/egressd/dataplane"
)

// Classifier owns the program and maps of bpf/src/frompod.c, pinned by name under the pin root
// so that a restarted agent finds the maps its links' program still uses.
type Classifier struct {
	Program *ebpf.Program
	objs    bpf.FromPodObjects
	written content
	// names maps ids to what they stand for, as of the last Apply (read by metrics scrapes,
	// concurrently).
	names atomic.Pointer[map[uint32]string]
	info  ruleInfo
	// fwSets are the firewall entries of each namespace id as written, so that a sync
	// rewrites only the namespaces whose rules changed.
	fwSets map[uint32]*fwSet
	// gen is the value of egressd_fw_gen.
	gen uint32
	// logging is read by ServeACLLog, concurrently with Apply.
	logging   atomic.Pointer[aclLogging]
	logReader atomic.Pointer[ringbuf.Reader]
	// fwTexts are the rule texts of each namespace id as written. They are written after the
	// entries that enforce, which need not wait for them.
	fwTexts map[uint32]*writtenTexts
}

type writtenTexts struct {
	from  *fwSet // the set they were written from; nil when adopted from a predecessor
	texts map[bpf.FromPodStatKey]bpf.FromPodRuleText
}

// fwSet is what one namespace's EgressFirewall put in the maps.
type fwSet struct {
	// fingerprint of the compiled rules the entries came from; 0 forces a rewrite.
	fingerprint uint64
	fw          map[bpf.FromPodLpmKey]bpf.FromPodCandidates
	ports       map[bpf.FromPodPortKey]uint8
	texts       map[bpf.FromPodStatKey]bpf.FromPodRuleText
}

func newFwSet() *fwSet {
	return &fwSet{fw: map[bpf.FromPodLpmKey]bpf.FromPodCandidates{}, ports: map[bpf.FromPodPortKey]uint8{}, texts: map[bpf.FromPodStatKey]bpf.FromPodRuleText{}}
}

// content is what egressd wrote to the maps, to diff against.
type content struct {
	pods     map[bpf.FromPodAddr]bpf.FromPodPodInfo
	cluster  map[bpf.FromPodClusterKey]uint8
	qos      map[bpf.FromPodLpmKey]bpf.FromPodQosValue
	ids      map[uint32]bpf.FromPodName
	qosRules map[bpf.FromPodStatKey]bpf.FromPodRuleText
}

func newContent() content {
	return content{
		pods: map[bpf.FromPodAddr]bpf.FromPodPodInfo{}, cluster: map[bpf.FromPodClusterKey]uint8{},
		qos: map[bpf.FromPodLpmKey]bpf.FromPodQosValue{}, ids: map[uint32]bpf.FromPodName{},
		qosRules: map[bpf.FromPodStatKey]bpf.FromPodRuleText{},
	}
}

// Options of Load.
type Options struct {
	// ACLLogRate is how many firewall verdicts per second and CPU may be logged (the
	// acl-logging meter); 0 logs nothing.
	ACLLogRate uint32
}

// DefaultACLLogRate is upstream's acl-logging-rate-limit default.
const DefaultACLLogRate = 20

// Load loads the classifier, reusing the maps pinned under pinRoot (their content keeps
// enforcing until the first Apply rewrites what changed).
func Load(pinRoot string, o Options) (*Classifier, error) {
	if err := os.MkdirAll(pinRoot, 0o755); err != nil {
		return nil, fmt.Errorf("pin root %s (is bpffs mounted?): %w", pinRoot, err)
	}
	c := &Classifier{}
	spec, err := bpf.LoadFromPod()
	if err != nil {
		return nil, fmt.Errorf("load classifier: %w", err)
	}
	if err := spec.Variables["log_rate"].Set(o.ACLLogRate); err != nil {
		return nil, fmt.Errorf("load classifier: log_rate: %w", err)
	}
	opts := &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: pinRoot}}
	err = spec.LoadAndAssign(&c.objs, opts)
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		// An upgrade changed a map's layout: start these maps afresh.
		for _, name := range mapNames() {
			os.Remove(pinRoot + "/" + name)
		}
		err = spec.LoadAndAssign(&c.objs, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("load classifier: %w", err)
	}
	c.Program = c.objs.EgressdFrompod
	if err = c.read(); err != nil {
		c.objs.Close()
		return nil, err
	}
	return c, nil
}

// linkScoped destinations never leave the link, so no egress policy applies to them; IPv6
// neighbour discovery (to link-local and solicited-node multicast addresses) must always pass.
var linkScoped = []netip.Prefix{netip.MustParsePrefix("fe80::/10"), netip.MustParsePrefix("ff00::/8")}

// mapNames are the names of the program's maps, every one pinned by name under the pin root.
var mapNames = sync.OnceValue(func() []string {
	spec, err := bpf.LoadFromPod()
	if err != nil {
		panic(fmt.Sprintf("the embedded classifier object: %v", err)) // a build defect
	}
	var names []string
	for name, m := range spec.Maps {
		if m.Pinning == ebpf.PinByName {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
})

// read loads what the pinned maps hold (a previous agent's state); firewall entries are
// grouped into per-namespace sets of unknown fingerprint, so that the first sync rewrites
// what differs and removes what no namespace wants any more.
func (c *Classifier) read() error {
	c.written = newContent()
	fw := map[bpf.FromPodLpmKey]bpf.FromPodCandidates{}
	ports := map[bpf.FromPodPortKey]uint8{}
	texts := map[bpf.FromPodStatKey]bpf.FromPodRuleText{}
	w := &c.written
	errs := []error{
		readMap(c.objs.EgressdPods, w.pods), readMap(c.objs.EgressdCluster, w.cluster), readMap(c.objs.EgressdQos, w.qos),
		readMap(c.objs.EgressdIds, w.ids), readMap(c.objs.EgressdQosRules, w.qosRules),
		readMap(c.objs.EgressdFw, fw), readMap(c.objs.EgressdFwPorts, ports), readMap(c.objs.EgressdFwRules, texts),
	}
	var zero uint32
	errs = append(errs, c.objs.EgressdFwGen.Lookup(&zero, &c.gen))
	c.fwSets = map[uint32]*fwSet{}
	set := func(id uint32) *fwSet {
		if c.fwSets[id] == nil {
			c.fwSets[id] = newFwSet()
		}
		return c.fwSets[id]
	}
	for k, v := range fw {
		set(lpmID(k)).fw[k] = v
	}
	for k, v := range ports {
		set(k.NsId).ports[k] = v
	}
	c.fwTexts = map[uint32]*writtenTexts{}
	for k, v := range texts {
		if c.fwTexts[k.NsId] == nil {
			c.fwTexts[k.NsId] = &writtenTexts{texts: map[bpf.FromPodStatKey]bpf.FromPodRuleText{}}
		}
		c.fwTexts[k.NsId].texts[k] = v
	}
	return errors.Join(errs...)
}

func readMap[K comparable, V any](m *ebpf.Map, into map[K]V) error {
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		into[k] = v
	}
	return it.Err()
}

// Close releases file descriptors; pinned maps and what uses them stay.
func (c *Classifier) Close() {
	if r := c.logReader.Load(); r != nil {
		r.Close()
	}
	c.objs.Close()
}

// ID is the stable classifier id of a name (namespace, or namespace + QoS rule set): the same
// after a restart, so that a new agent's entries line up with the old ones. 0 means none.
func ID(name string, taken map[uint32]string) uint32 {
	for salt := 0; ; salt++ {
		h := fnv.New32a()
		h.Write([]byte(name))
		if salt > 0 {
			h.Write([]byte("#" + strconv.Itoa(salt)))
		}
		id := h.Sum32() &^ lpmIDv6
		if id != 0 && (taken[id] == "" || taken[id] == name) {
			taken[id] = name
			return id
		}
	}
}

func addrOf(a netip.Addr) bpf.FromPodAddr {
	k := bpf.FromPodAddr{Family: 6}
	if a.Is4() {
		k.Family = 4
		b := a.As4()
		copy(k.Ip[:], b[:])
	} else {
		k.Ip = a.As16()
	}
	return k
}

// lpmIDv6 marks an IPv6 key's id (the program's LPM_ID_V6); ids are below it.
const lpmIDv6 = 1 << 31

func lpmKey(id uint32, p netip.Prefix) bpf.FromPodLpmKey {
	k := bpf.FromPodLpmKey{Prefixlen: uint32(32 + p.Bits()), Id: id}
	if p.Addr().Is4() {
		b := p.Addr().As4()
		copy(k.Ip[:], b[:])
	} else {
		k.Id |= lpmIDv6
		k.Ip = p.Addr().As16()
	}
	return k
}

// lpmID is the namespace id or QoS class of a key.
func lpmID(k bpf.FromPodLpmKey) uint32 { return k.Id &^ lpmIDv6 }

// Apply writes the classifier's part of s, returning failures per object. A policy that failed
// to compile or does not fit keeps every entry it had (fail closed).
func (c *Classifier) Apply(s *dataplane.ClassifierState) map[dataplane.Origin]error {
	failed := map[dataplane.Origin]error{}
	want := newContent()
	keep := map[uint32]bool{} // ids whose previous entries stay
	taken := map[uint32]string{}

	nsID := map[string]uint32{}
	wantSets := map[uint32]*fwSet{}
	logging := aclLogging{}
	nsLog := map[string]uint8{}
	for _, fw := range sortedFirewalls(s.Firewalls) {
		id := ID("fw/"+fw.Origin.Namespace, taken)
		nsID[fw.Origin.Namespace] = id
		nsLog[fw.Origin.Namespace] = logFlags(fw.Log)
		logging[id] = struct {
			namespace string
			log       dataplane.ACLLog
		}{fw.Origin.Namespace, fw.Log}
		old := c.fwSets[id]
		if err := fw.Err; err != nil {
			failed[fw.Origin] = err
			wantSets[id] = old // what is enforced stays (fail closed)
			continue
		}
		fp := fingerprint(fw.Rules)
		if old != nil && old.fingerprint == fp {
			wantSets[id] = old
			continue
		}
		set, err := firewallSet(id, fw.Rules)
		if err != nil {
			failed[fw.Origin] = err
			wantSets[id] = old
			continue
		}
		set.fingerprint = fp
		wantSets[id] = set
	}
	qosByNS := map[string]dataplane.QoS{}
	for _, q := range s.QoS {
		qosByNS[q.Origin.Namespace] = q
	}
	classes := map[string]uint32{}
	for _, p := range s.Pods {
		info := bpf.FromPodPodInfo{NsId: nsID[p.Origin.Namespace], Log: nsLog[p.Origin.Namespace]}
		if q, ok := qosByNS[p.Origin.Namespace]; ok && len(p.QoSRules) > 0 {
			name := "qos/" + p.Origin.Namespace + "/" + joinInts(p.QoSRules)
			id, seen := classes[name]
			if !seen {
				id = ID(name, taken)
				classes[name] = id
				if q.Err != nil {
					failed[q.Origin] = q.Err
					keep[id] = true
				} else if err := qosEntries(id, ID("fw/"+p.Origin.Namespace, taken), selected(q.Rules, p.QoSRules), &want); err != nil {
					failed[q.Origin] = err
					keep[id] = true
				}
			}
			info.QosClass = id
			want.ids[id] = nameOf(p.Origin.Namespace)
		}
		for _, ip := range p.IPs {
			want.pods[addrOf(ip)] = info
		}
	}
	for _, q := range s.QoS {
		id := ID("fw/"+q.Origin.Namespace, taken)
		want.ids[id] = nameOf(q.Origin.Namespace)
		for _, r := range q.Rules {
			want.qosRules[bpf.FromPodStatKey{NsId: id, Rule: uint32(r.Index)}] = ruleText(r.Text)
		}
	}
	for id, name := range taken {
		if ns, ok := strings.CutPrefix(name, "fw/"); ok {
			want.ids[id] = nameOf(ns)
		}
	}
	for _, p := range append(linkScoped, s.ClusterNetworks...) {
		want.cluster[bpf.FromPodClusterKey{Prefixlen: uint32(32 + p.Bits()), Dst: addrOf(p.Masked().Addr())}] = 1
	}
	c.names.Store(&taken)
	c.logging.Store(&logging)
	c.recordRules(s, failed)
	// QoS entries of classes that failed stay as written.
	keepFailed(c.written.qos, want.qos, keep, lpmID)
	// Cached decisions go stale when what they were decided from changes.
	fwChanged := !maps.Equal(c.written.cluster, want.cluster)
	for id, set := range wantSets {
		fwChanged = fwChanged || c.fwSets[id] != set
	}
	for id := range c.fwSets {
		_, kept := wantSets[id]
		fwChanged = fwChanged || !kept
	}
	// Adds and changes before removals: every destination sees either the old or the new
	// verdict, never a mixture (a removed prefix falls back to an already updated shorter one).
	errs := []error{
		c.syncFirewalls(wantSets),
		syncMap(c.objs.EgressdQos, c.written.qos, want.qos),
		syncMap(c.objs.EgressdCluster, c.written.cluster, want.cluster),
		syncMap(c.objs.EgressdPods, c.written.pods, want.pods),
		c.nextGeneration(fwChanged),
		c.syncFirewallTexts(wantSets),
		syncMap(c.objs.EgressdIds, c.written.ids, want.ids),
		syncMap(c.objs.EgressdQosRules, c.written.qosRules, want.qosRules),
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

func sortedFirewalls(fws []dataplane.Firewall) []dataplane.Firewall {
	out := append([]dataplane.Firewall(nil), fws...)
	sort.Slice(out, func(i, j int) bool { return out[i].Origin.Namespace < out[j].Origin.Namespace })
	return out
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func selected(rules []dataplane.QoSRule, idx []int) []dataplane.QoSRule {
	var out []dataplane.QoSRule
	for _, r := range rules {
		for _, i := range idx {
			if r.Index == i {
				out = append(out, r)
			}
		}
	}
	return out
}

// firewallSet computes the entries of one namespace's firewall.
func firewallSet(id uint32, rules []dataplane.FirewallRule) (*fwSet, error) {
	set := newFwSet()
	trs := make([]Rule, len(rules))
	for i, r := range rules {
		trs[i] = Rule{Index: r.Index, Deny: r.Deny, Prefixes: r.Prefixes, HasPorts: len(r.Ports) > 0}
		set.texts[bpf.FromPodStatKey{NsId: id, Rule: uint32(r.Index)}] = ruleText(r.Text)
		for _, p := range r.Ports {
			set.ports[bpf.FromPodPortKey{NsId: id, Rule: uint16(r.Index), Proto: p.Protocol, Port: p.Port}] = 1
		}
	}
	table, err := Table(trs)
	if err != nil {
		return nil, err
	}
	for p, cs := range table {
		var v bpf.FromPodCandidates
		v.N = uint32(len(cs))
		for i, cand := range cs {
			v.C[i].Rule = uint16(cand.Index)
			v.C[i].HasPorts = b2u(cand.HasPorts)
			v.C[i].Action = b2u(cand.Deny)
		}
		set.fw[lpmKey(id, p)] = v
	}
	return set, nil
}

// fingerprint identifies compiled rules: equal rules give equal fingerprints.
func fingerprint(rules []dataplane.FirewallRule) uint64 {
	h := fnv.New64a()
	var b [8]byte
	num := func(v uint64) { binary.LittleEndian.PutUint64(b[:], v); h.Write(b[:]) }
	for _, r := range rules {
		num(uint64(r.Index))
		num(uint64(b2u(r.Deny)))
		h.Write([]byte(r.Text))
		num(uint64(len(r.Prefixes)))
		for _, p := range r.Prefixes {
			a := p.Addr().As16()
			h.Write(a[:])
			num(uint64(p.Bits()))
		}
		num(uint64(len(r.Ports)))
		for _, p := range r.Ports {
			num(uint64(p.Protocol)<<16 | uint64(p.Port))
		}
	}
	return h.Sum64() | 1 // never 0, which means "unknown"
}

// syncFirewalls writes the namespaces whose entries changed and removes those of namespaces
// gone, leaving the others untouched.
func (c *Classifier) syncFirewalls(want map[uint32]*fwSet) error {
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
func (c *Classifier) syncFirewallTexts(want map[uint32]*fwSet) error {
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

func qosEntries(class, nsID uint32, rules []dataplane.QoSRule, into *content) error {
	trs := make([]Rule, len(rules))
	dscp := map[int]uint8{}
	for i, r := range rules {
		trs[i] = Rule{Index: r.Index, Prefixes: r.Prefixes}
		dscp[r.Index] = r.DSCP
	}
	table, err := Table(trs)
	if err != nil {
		return err
	}
	for p, cs := range table {
		into.qos[lpmKey(class, p)] = bpf.FromPodQosValue{Dscp: dscp[cs[0].Index], Rule: uint16(cs[0].Index), NsId: nsID}
	}
	return nil
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// syncMap makes m hold want, given that it holds have; have becomes want on success. Changes go
// in one batch call and removals in another; should a batch fail (a kernel without batch
// operations for the map type, or one entry the kernel refuses), the entries are written one by
// one so that every failure names its map and everything else still lands.
func syncMap[K comparable, V comparable](m *ebpf.Map, have, want map[K]V) error {
	var keys []K
	var values []V
	for k, v := range want {
		if old, ok := have[k]; !ok || old != v {
			keys, values = append(keys, k), append(values, v)
		}
	}
	var gone []K
	for k := range have {
		if _, ok := want[k]; !ok {
			gone = append(gone, k)
		}
	}
	var errs []error
	if len(keys) > 0 {
		if _, err := m.BatchUpdate(keys, values, nil); err == nil {
			for i, k := range keys {
				have[k] = values[i]
			}
		} else {
			for i, k := range keys {
				// Pointers let cilium/ebpf pass the structs' memory as is, without reflection.
				if err := m.Put(&keys[i], &values[i]); err != nil {
					errs = append(errs, fmt.Errorf("%s: update: %w", m.String(), err))
					continue
				}
				have[k] = values[i]
			}
		}
	}
	if len(gone) > 0 {
		if _, err := m.BatchDelete(gone, nil); err != nil {
			for _, k := range gone {
				if err := m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					errs = append(errs, fmt.Errorf("%s: delete: %w", m.String(), err))
					continue
				}
				delete(have, k)
			}
		} else {
			for _, k := range gone {
				delete(have, k)
			}
		}
	}
	return errors.Join(errs...)
}

// Cleanup removes the classifier's pinned maps under pinRoot (egressctl cleanup).
func Cleanup(pinRoot string) error {
	var errs []error
	for _, name := range mapNames() {
		if err := os.Remove(pinRoot + "/" + name); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

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
	var names map[uint32]string
	if p := c.names.Load(); p != nil {
		names = *p
	}
	var k bpf.FromPodStatKey
	var per []bpf.FromPodCounters
	it := m.Iterate()
	for it.Next(&k, &per) {
		ns, ok := names[k.NsId]
		if !ok {
			continue // a namespace gone since
		}
		ref := RuleRef{Namespace: strings.TrimPrefix(ns, "fw/"), Rule: int(k.Rule)}
		sum := out[ref]
		for _, v := range per {
			sum.Packets += v.Packets
			sum.Bytes += v.Bytes
		}
		out[ref] = sum
	}
	return out, it.Err()
}

// recordRules remembers what the metrics label rules with. A policy that failed keeps the rules
// it had, and so do its labels.
func (c *Classifier) recordRules(s *dataplane.ClassifierState, failed map[dataplane.Origin]error) {
	c.info.mu.Lock()
	defer c.info.mu.Unlock()
	actions, dscps := map[RuleRef]string{}, map[RuleRef]uint8{}
	keepNS := map[string]bool{}
	firewalls := 0
	for _, fw := range s.Firewalls {
		firewalls++
		if failed[fw.Origin] != nil {
			keepNS[fw.Origin.Namespace] = true
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
	for _, q := range s.QoS {
		for _, r := range q.Rules {
			dscps[RuleRef{q.Origin.Namespace, r.Index}] = r.DSCP
		}
	}
	c.info.fwAction, c.info.qosDSCP, c.info.firewalls = actions, dscps, firewalls
}

func nameOf(s string) bpf.FromPodName {
	var n bpf.FromPodName
	copy(n.S[:len(n.S)-1], s)
	return n
}

func ruleText(s string) bpf.FromPodRuleText {
	var t bpf.FromPodRuleText
	copy(t.S[:len(t.S)-1], s)
	return t
}

// keepFailed carries over the written entries of ids whose policy failed (fail closed).
func keepFailed[K comparable, V any](written, want map[K]V, keep map[uint32]bool, id func(K) uint32) {
	for k, v := range written {
		if keep[id(k)] {
			want[k] = v
		}
	}
}
