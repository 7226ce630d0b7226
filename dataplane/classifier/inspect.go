package classifier

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
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
	// Namespace of the source pod; empty if the source is no local pod (packets pass untouched).
	Namespace string
	// Exempt: the destination is in the cluster or service networks (or link-scoped).
	Exempt bool
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
	// Mark is the routing mark the classifier sets within the mark mask (0: none: the pod has
	// none, the destination is exempt, or the packet is dropped).
	Mark uint32
}

// Trace evaluates a new flow from src to dst (proto: IANA number, 0 for none) as the
// classifier would. Replies of connections initiated from outside are never dropped; this
// traces a flow the pod initiates.
func (in *Inspector) Trace(src, dst netip.Addr, proto uint8, port uint16) (Trace, error) {
	tr := Trace{Verdict: "allow", Rule: -1, DSCP: -1, QoSRule: -1}
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
	host := netip.PrefixFrom(dst, dst.BitLen())
	var one uint8
	tr.Exempt = in.maps["egressd_cluster"].Lookup(prefixKey(host), &one) == nil
	if pod.NsId != 0 && !tr.Exempt {
		var e bpf.FromPodFwEntry
		if err := in.maps["egressd_fw"].Lookup(lpmKey(nsID(pod.NsId), host), &e); err == nil {
			if e.Ports != 0 && port != 0 {
				var pe bpf.FromPodFwEntry
				pk := portKey(nsID(pod.NsId), PortPrefix{dataplane.Port{Protocol: proto, Port: port}, host})
				if in.maps["egressd_fw_ports"].Lookup(pk, &pe) == nil && (e.Verdict == verdictPass || pe.Rule < e.Rule) {
					e = pe
				}
			}
			if e.Verdict != verdictPass {
				tr.Rule = int(e.Rule)
				logged := pod.Log & logAllow
				if e.Verdict == verdictDeny {
					tr.Verdict = "deny"
					logged = pod.Log & logDeny
				}
				tr.Logged = logged != 0
				var t bpf.FromPodRuleText
				if in.maps["egressd_fw_rules"].Lookup(bpf.FromPodStatKey{NsId: pod.NsId, Rule: uint32(e.Rule)}, &t) == nil {
					tr.RuleText = cstr(t.S[:])
				}
			}
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
	if pod.Mark != 0 && tr.Verdict != "deny" && in.maps["egressd_steer_exempt"].Lookup(prefixKey(host), &one) != nil {
		tr.Mark = pod.Mark
	}
	return tr, nil
}
