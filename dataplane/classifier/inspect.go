package classifier

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/cilium/ebpf"

	"github.com/egressd/egressd/bpf"
	"github.com/egressd/egressd/dataplane"
)

// Inspector reads what an agent programmed, from the maps pinned under its pin root
// (egressctl); it never writes.
type Inspector struct {
	maps map[string]*ebpf.Map
}

// Inspect opens the pinned maps under pinRoot read-only.
func Inspect(pinRoot string) (*Inspector, error) {
	in := &Inspector{maps: map[string]*ebpf.Map{}}
	for _, name := range mapNames() {
		if name == "egressd_fw_log" {
			continue // a ring buffer, the agent's to consume
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinRoot, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) && name == "egressd_frontends" {
			continue // an agent older than the map: it has no frontends
		}
		if err != nil {
			in.Close()
			return nil, fmt.Errorf("open %s (is egressd running with --bpf-pin-root %s?): %w", name, pinRoot, err)
		}
		in.maps[name] = m
	}
	return in, nil
}

// Close releases the maps.
func (in *Inspector) Close() {
	for _, m := range in.maps {
		m.Close()
	}
}

func cstr(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// ProgrammedRule is a programmed rule with its counters.
type ProgrammedRule struct {
	Namespace string
	Index     int
	Text      string
	Counters  Counters
}

// Rules lists the programmed EgressFirewall (qos false) or EgressQoS rules, by namespace and
// index, with their counters.
func (in *Inspector) Rules(qos bool) ([]ProgrammedRule, error) {
	texts, stats := in.maps["egressd_fw_rules"], in.maps["egressd_fw_stats"]
	if qos {
		texts, stats = in.maps["egressd_qos_rules"], in.maps["egressd_qos_stats"]
	}
	names, err := in.names()
	if err != nil {
		return nil, err
	}
	var out []ProgrammedRule
	var k bpf.FromPodStatKey
	var t bpf.FromPodRuleText
	it := texts.Iterate()
	for it.Next(&k, &t) {
		r := ProgrammedRule{Namespace: names[k.NsId], Index: int(k.Rule), Text: cstr(t.S[:])}
		var per []bpf.FromPodCounters
		if err := stats.Lookup(k, &per); err == nil {
			for _, c := range per {
				r.Counters.Packets += c.Packets
				r.Counters.Bytes += c.Bytes
			}
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Index < out[j].Index
	})
	return out, it.Err()
}

// FirewallRule reads the text of a namespace's EgressFirewall rule, if programmed. The agent
// writes a rule's text after the entries that enforce it, and removes it after them, so that
// its presence shows the rule enforced and its absence shows it gone.
func (in *Inspector) FirewallRule(namespace string, index int) (text string, ok bool, err error) {
	names, err := in.names()
	if err != nil {
		return "", false, err
	}
	for id, name := range names { // a namespace's QoS classes carry its name too
		if name != namespace {
			continue
		}
		var t bpf.FromPodRuleText
		err := in.maps["egressd_fw_rules"].Lookup(statKey(nsID(id), index), &t)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			continue
		}
		return cstr(t.S[:]), err == nil, err
	}
	return "", false, nil
}

func (in *Inspector) names() (map[uint32]string, error) {
	out := map[uint32]string{}
	var id uint32
	var n bpf.FromPodName
	it := in.maps["egressd_ids"].Iterate()
	for it.Next(&id, &n) {
		out[id] = cstr(n.S[:])
	}
	return out, it.Err()
}

// Trace is what the classifier does with one flow from a pod.
type Trace struct {
	// Namespace of the source pod; empty if the source is no local pod (packets pass untouched;
	// Exempt and SteerExempt still say what the destination is).
	Namespace string
	// Exempt: the destination is in the cluster or service networks (or link-scoped), or is a
	// Service's frontend (Frontend).
	Exempt bool
	// Frontend: the destination address, protocol and port are a Service's frontend outside the
	// service networks (a load-balancer or external IP), judged after DNAT by the backend.
	Frontend bool
	// Verdict is "allow" or "deny"; Rule is -1 when no rule matched (allowed by default).
	Verdict  string
	Rule     int
	RuleText string
	// Logged: the verdict is written as an ACL log line (the namespace's k8s.ovn.org/acl-logging
	// names a severity for it).
	Logged bool
	// DSCP set by EgressQoS, -1 if none.
	DSCP    int
	QoSRule int
	QoSText string
	// SteerExempt: the destination is a cluster network, a load-balancer IP or a node address,
	// to which no pod's traffic is steered nor SNATed to an egress IP (the agent gives the
	// classifier and nftables the same exemptions).
	SteerExempt bool
	// Mark is the routing mark the classifier sets within the mark mask (0: none: the pod has
	// none, the destination is exempt, or the packet is dropped).
	Mark uint32
}

// Trace evaluates a new flow from src to dst (proto: IANA number, 0 for none) as the
// classifier would. Replies of connections initiated from outside are never dropped; this
// traces a flow the pod initiates.
func (in *Inspector) Trace(src, dst netip.Addr, proto uint8, port uint16) (Trace, error) {
	tr := Trace{Verdict: "allow", Rule: -1, DSCP: -1, QoSRule: -1}
	host := netip.PrefixFrom(dst, dst.BitLen())
	var one uint8
	tr.Exempt = in.maps["egressd_cluster"].Lookup(prefixKey(host), &one) == nil
	if frontends := in.maps["egressd_frontends"]; !tr.Exempt && port != 0 && frontends != nil {
		fk := frontendKey(dataplane.Frontend{Addr: dst, Port: dataplane.Port{Protocol: proto, Port: port}})
		tr.Frontend = frontends.Lookup(fk, &one) == nil
		tr.Exempt = tr.Frontend
	}
	tr.SteerExempt = in.maps["egressd_steer_exempt"].Lookup(prefixKey(host), &one) == nil
	var pod bpf.FromPodPodInfo
	if err := in.maps["egressd_pods"].Lookup(addrOf(src), &pod); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return tr, nil
		}
		return tr, err
	}
	names, err := in.names()
	if err != nil {
		return tr, err
	}
	tr.Namespace = names[pod.NsId]
	if tr.Namespace == "" {
		tr.Namespace = names[pod.QosClass]
	}
	if pod.NsId != 0 && !tr.Exempt {
		rules, err := in.firewallRules(nsID(pod.NsId))
		if err != nil {
			return tr, err
		}
		if r, ok := dataplane.FirstMatch(rules, dst, proto, port); ok {
			tr.Rule, tr.RuleText = r.Index, r.Text
			logged := pod.Log & logAllow
			if r.Deny {
				tr.Verdict = "deny"
				logged = pod.Log & logDeny
			}
			tr.Logged = logged != 0
		}
	}
	if pod.QosClass != 0 {
		var q bpf.FromPodQosValue
		if err := in.maps["egressd_qos"].Lookup(lpmKey(qosClass(pod.QosClass), host), &q); err == nil {
			tr.DSCP, tr.QoSRule = int(q.Dscp), int(q.Rule)
			var t bpf.FromPodRuleText
			if in.maps["egressd_qos_rules"].Lookup(bpf.FromPodStatKey{NsId: q.NsId, Rule: uint32(q.Rule)}, &t) == nil {
				tr.QoSText = cstr(t.S[:])
			}
		}
	}
	if tr.Verdict != "deny" && !tr.SteerExempt {
		tr.Mark = pod.Mark
	}
	return tr, nil
}

// firewallRules reads a namespace's firewall back from egressd_fw and egressd_fw_ports as rules
// for dataplane.FirstMatch: one per entry that decides, holding the entry's prefix (and its
// protocol and port for a ports entry) under the index and verdict of the rule it names. An
// entry names a rule that matches its prefix, and the entry of a matching rule's own prefix
// names that rule or an earlier one, so the first match over these rules is the first match
// over the namespace's rules.
func (in *Inspector) firewallRules(id nsID) ([]dataplane.FirewallRule, error) {
	var rules []dataplane.FirewallRule
	add := func(e bpf.FromPodFwEntry, p netip.Prefix, ports []dataplane.Port) {
		if e.Verdict == verdictPass {
			return
		}
		r := dataplane.FirewallRule{Index: int(e.Rule), Deny: e.Verdict == verdictDeny, Prefixes: []netip.Prefix{p}, Ports: ports}
		var t bpf.FromPodRuleText
		if in.maps["egressd_fw_rules"].Lookup(statKey(id, r.Index), &t) == nil {
			r.Text = cstr(t.S[:])
		}
		rules = append(rules, r)
	}
	var k bpf.FromPodLpmKey
	var e bpf.FromPodFwEntry
	it := in.maps["egressd_fw"].Iterate()
	for it.Next(&k, &e) {
		if nsID(lpmID(k)) == id {
			add(e, keyPrefix(k.Id, k.Ip, int(k.Prefixlen)-32), nil)
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read egressd_fw: %w", err)
	}
	var pk bpf.FromPodPortKey
	it = in.maps["egressd_fw_ports"].Iterate()
	for it.Next(&pk, &e) {
		if nsID(pk.Id&^lpmIDv6) == id {
			add(e, keyPrefix(pk.Id, pk.Ip, int(pk.Prefixlen)-64), []dataplane.Port{{Protocol: pk.Proto, Port: htons(pk.Port)}})
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read egressd_fw_ports: %w", err)
	}
	slices.SortStableFunc(rules, func(a, b dataplane.FirewallRule) int { return cmp.Compare(a.Index, b.Index) })
	return rules, nil
}

// keyPrefix is the destination prefix of an LPM key of id (its family bit) and address.
func keyPrefix(id uint32, ip [16]byte, bits int) netip.Prefix {
	if id&lpmIDv6 != 0 {
		return netip.PrefixFrom(netip.AddrFrom16(ip), bits)
	}
	return netip.PrefixFrom(netip.AddrFrom4([4]byte(ip[:4])), bits)
}
