package classifier

import (
	"hash/fnv"
	"net/netip"
	"strconv"
	"strings"

	"github.com/egressd/egressd/bpf"
	"github.com/egressd/egressd/dataplane"
)

// nsID is the classifier's id of a namespace: the firewall's LPM keys, port keys and counters
// are keyed by it, and QoS counters name their namespace by it. 0 means none.
type nsID uint32

// qosClass is the classifier's id of a set of QoS rules of one namespace (the rules that select
// a pod): the QoS LPM keys are keyed by it. 0 means none.
type qosClass uint32

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

// ids allocates the ids of one Apply. Namespace ids and QoS classes share one space (both key
// egressd_ids, and LPM keys of egressd_fw and egressd_qos alike). The names hashed are part of
// the pinned state's contract: changing them changes every id after an upgrade.
type ids struct {
	taken      map[uint32]string
	namespaces map[nsID]string
	classes    map[qosClass]string // the namespace of each class
}

func newIDs() *ids {
	return &ids{taken: map[uint32]string{}, namespaces: map[nsID]string{}, classes: map[qosClass]string{}}
}

// namespace is the id of a namespace.
func (a *ids) namespace(ns string) nsID {
	id := nsID(ID("fw/"+ns, a.taken))
	a.namespaces[id] = ns
	return id
}

// class is the id of the QoS rules (by index) of a namespace that select a pod.
func (a *ids) class(ns string, rules []int) qosClass {
	s := make([]string, len(rules))
	for i, r := range rules {
		s[i] = strconv.Itoa(r)
	}
	id := qosClass(ID("qos/"+ns+"/"+strings.Join(s, ","), a.taken))
	a.classes[id] = ns
	return id
}

// lpmIDv6 marks an IPv6 key's id (the program's LPM_ID_V6); ids are below it.
const lpmIDv6 = 1 << 31

// lpmKey is the key of prefix p of a namespace's firewall or of a QoS class.
func lpmKey[ID nsID | qosClass](id ID, p netip.Prefix) bpf.FromPodLpmKey {
	k := bpf.FromPodLpmKey{Prefixlen: uint32(32 + p.Bits()), Id: uint32(id)}
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

// prefixKey is the key of p in egressd_cluster and egressd_steer_exempt.
func prefixKey(p netip.Prefix) bpf.FromPodClusterKey {
	return bpf.FromPodClusterKey{Prefixlen: uint32(32 + p.Bits()), Dst: addrOf(p.Masked().Addr())}
}

// frontendKey is the key of f in egressd_frontends.
func frontendKey(f dataplane.Frontend) bpf.FromPodFrontendKey {
	return bpf.FromPodFrontendKey{Dst: addrOf(f.Addr), Proto: f.Protocol, Port: htons(f.Port.Port)}
}

func statKey(id nsID, rule int) bpf.FromPodStatKey {
	return bpf.FromPodStatKey{NsId: uint32(id), Rule: uint32(rule)}
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
