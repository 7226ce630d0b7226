// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// EgressFirewall, for flows the pod initiates (a conntrack reply is never dropped) to
// destinations outside the cluster and service networks (egressd_cluster) and other than a
// Service's frontend (egressd_frontends): one LPM lookup by
// (namespace, destination) gives the first rule without ports that contains it, and, when a rule
// restricted to ports comes before it, one LPM lookup by (namespace, protocol, port,
// destination) the first such rule; the earlier of the two decides; no match allows. The decision per (namespace, destination, protocol,
// port) is cached per CPU (egressd_fw_verdicts) until the agent next changes the firewall
// entries (egressd_fw_gen), so that later packets to the same place skip the lookups.
#pragma once

#include "maps.h"
#include "parse.h"
#include "conntrack.h"
#include "acllog.h"


// What a prefix of a namespace's firewall decides (value of egressd_fw and egressd_fw_ports).
struct fw_entry {
	__u16 rule;    // the rule that decides, when verdict is not VERDICT_PASS
	__u8 verdict;  // VERDICT_*: in egressd_fw, the first rule without ports containing the
		       // prefix (VERDICT_PASS: none)
	__u8 ports;    // egressd_fw only: a rule restricted to ports, before that one, contains the
		       // prefix: egressd_fw_ports may hold an earlier match
};

// The key of egressd_fw_ports: per namespace and (protocol, destination port) named by a rule,
// the prefixes of the rules naming it; the id, protocol and port are always matched in full.
struct port_key {
	__u32 prefixlen; // 64 + prefix length
	__u32 id;        // namespace id, | LPM_ID_V6 for IPv6
	__u8 proto;
	__u8 pad;
	__u16 port;      // network byte order
	__u8 ip[16];     // IPv4 in the first 4 bytes
};

// Per namespace and destination prefix: the first rule without ports that contains it (and
// whether a rule with ports comes before). One entry per prefix any rule names, whatever the
// number of rules restricted to ports that overlap there.
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_key);
	__type(value, struct fw_entry);
} egressd_fw SEC(".maps");

// Per namespace, (protocol, port) and prefix: the first rule naming that protocol and port
// whose prefixes contain it. Its size is the sum over rules of prefixes x ports: no product of
// overlapping rules.
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct port_key);
	__type(value, struct fw_entry);
} egressd_fw_ports SEC(".maps");

// A Service frontend outside the service networks: an address, protocol and port that
// kube-proxy DNATs for pods on their node (a load-balancer ingress IP, an external IP).
struct frontend_key {
	struct addr dst;
	__u8 proto;
	__u8 pad;
	__u16 port; // network byte order
};

// The Services' frontends outside the service networks. Their flows are judged after DNAT, by
// the backend, as cluster IPs' are (upstream applies its ACLs after its load balancers); only
// the Service's ports: the address's other ports stay judged here.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct frontend_key);
	__type(value, __u8);
} egressd_frontends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct stat_key);
	__type(value, struct counters);
} egressd_fw_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct stat_key);
	__type(value, struct rule_text);
} egressd_fw_rules SEC(".maps");

// The decision cache.

struct verdict_key {
	__u32 ns_id;
	__u16 dport;
	__u8 proto;
	__u8 family;
	__u8 dst[16];
};

struct verdict {
	__u32 gen; // egressd_fw_gen when decided: any other value means stale
	__u16 rule;
	__u8 verdict; // VERDICT_*
	__u8 ports;   // the ports decided it, or could have: a rule with ports came first
};

// The decision cache is direct-mapped, per CPU: a slot per hash of the key, overwritten on a
// miss. Lookups and fills are plain loads and stores, with no lock and no allocation: tc runs
// with bottom halves disabled, so no two programs use one CPU's slots at once.
#define VERDICT_SLOTS 4096

struct verdict_slot {
	struct verdict_key key;
	struct verdict v;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, VERDICT_SLOTS);
	__type(key, __u32);
	__type(value, struct verdict_slot);
} egressd_fw_verdicts SEC(".maps");

// The generation of the firewall entries (egressd_fw, egressd_fw_ports, egressd_cluster,
// egressd_frontends): the
// agent increments it after changing them, which makes every cached decision stale.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} egressd_fw_gen SEC(".maps");

// decide evaluates the firewall of namespace ns_id for p into v: the first rule without ports
// containing the destination (egressd_fw), unless an earlier rule naming the packet's protocol
// and port contains it (egressd_fw_ports). After the two exemptions, two lookups at most, for 1
// rule or 8000.
static __always_inline void decide(struct packet *p, __u32 ns_id, struct verdict *v)
{
	struct cluster_key ck = {.prefixlen = 32 + (p->dst.family == 4 ? 32 : 128), .dst = p->dst};
	if (bpf_map_lookup_elem(&egressd_cluster, &ck))
		return;
	if (p->dport) {
		struct frontend_key fk = {.dst = p->dst, .proto = p->proto, .port = bpf_htons(p->dport)};
		if (bpf_map_lookup_elem(&egressd_frontends, &fk))
			return;
	}
	struct lpm_key k = {};
	lpm_key_of(&k, ns_id, &p->dst);
	struct fw_entry *e = bpf_map_lookup_elem(&egressd_fw, &k);
	if (!e)
		return;
	v->rule = e->rule;
	v->verdict = e->verdict;
	v->ports = e->ports;
	if (!e->ports || !p->dport)
		return; // no port rule comes first, or the packet has no port
	struct port_key pk = {.prefixlen = 64 + (k.prefixlen - 32), .id = k.id, .proto = p->proto,
			      .port = bpf_htons(p->dport)};
	__builtin_memcpy(pk.ip, k.ip, 16);
	struct fw_entry *pe = bpf_map_lookup_elem(&egressd_fw_ports, &pk);
	if (pe && (v->verdict == VERDICT_PASS || pe->rule < v->rule)) {
		v->rule = pe->rule;
		v->verdict = pe->verdict;
	}
}

// slot_of hashes a decision key (FNV-1a over its six words) to a slot of egressd_fw_verdicts.
static __always_inline __u32 slot_of(struct verdict_key *k)
{
	__u32 *w = (__u32 *)k;
	__u32 h = 2166136261u;
#pragma unroll
	for (int i = 0; i < (int)(sizeof(*k) / 4); i++) {
		h ^= w[i];
		h *= 16777619u;
	}
	return (h ^ (h >> 16)) & (VERDICT_SLOTS - 1);
}

// Fragments. A later fragment has no ports: it is judged by what the firewall did with the
// first fragment of its datagram, remembered here (as Cilium does; upstream's OVN reassembles
// before its ACLs, to the same effect). A later fragment whose first was not seen (lost,
// reordered, expired or evicted) is judged by its destination alone when no rule with ports
// could decide it, and dropped otherwise: like a datagram that cannot be reassembled.
struct frag_key {
	__u8 family;
	__u8 proto;
	__u16 pad;
	__u32 id; // IPv4: 16 bits; IPv6: 32
	__u8 src[16];
	__u8 dst[16];
};

struct frag_verdict {
	__u64 seen_ns; // when the first fragment was judged
	__u16 rule;
	__u8 verdict; // VERDICT_PASS: passed uncounted (no rule, or a reply); else the rule's
	__u8 pad[5];
};

#define FRAG_TIMEOUT_NS (30ull * 1000000000) // the kernel's ipfrag_time

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 16384);
	__type(key, struct frag_key);
	__type(value, struct frag_verdict);
} egressd_fw_frags SEC(".maps");

// Fragment counters (egressd_fw_frag_stats, per CPU), indices:
#define FRAG_STAT_TRACKED 0   // first fragments whose verdict was remembered
#define FRAG_STAT_FOLLOWED 1  // later fragments judged by their first
#define FRAG_STAT_UNMATCHED 2 // later fragments without a first, judged by destination alone
#define FRAG_STAT_DROPPED 3   // later fragments without a first, dropped (ports decide)
#define FRAG_STATS 4

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, FRAG_STATS);
	__type(key, __u32);
	__type(value, __u64);
} egressd_fw_frag_stats SEC(".maps");

static __always_inline void frag_key_of(struct frag_key *k, struct packet *p)
{
	k->family = p->src.family;
	k->proto = p->proto;
	k->id = p->frag_id;
	__builtin_memcpy(k->src, p->src.ip, 16);
	__builtin_memcpy(k->dst, p->dst.ip, 16);
}

// Packets whose transport header the parser did not read (more IPv6 extension headers than it
// walks, a header cut short): their ports are unknown, so like a later fragment without its
// first they are judged by their destination alone where no rule restricted to ports could
// decide them, and dropped otherwise: hiding the port behind extension headers must not skip a
// port rule (OVS, upstream's datapath, walks the whole chain). Counters (egressd_fw_unparsed,
// per CPU), indices:
#define UNPARSED_JUDGED 0  // judged by destination alone
#define UNPARSED_DROPPED 1 // dropped: rules restricted to ports could decide them
#define UNPARSED_STATS 2

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, UNPARSED_STATS);
	__type(key, __u32);
	__type(value, __u64);
} egressd_fw_unparsed SEC(".maps");

static __always_inline void stat_count(void *stats, __u32 stat)
{
	__u64 *n = bpf_map_lookup_elem(stats, &stat);
	if (n)
		(*n)++;
}

// portless judges p, whose ports are unknown, into v by its destination alone; non-zero when a
// rule restricted to ports could decide it (the caller drops it).
static __always_inline int portless(struct packet *p, __u32 ns_id, struct verdict *v)
{
	decide(p, ns_id, v); // dport is 0: without ports
	return v->ports;
}

// enforce applies v to p: counted for its rule unless it passed without one.
static __always_inline int enforce(struct __sk_buff *skb, __u32 ns_id, struct verdict *v)
{
	if (v->verdict == VERDICT_PASS)
		return TCX_NEXT;
	count(&egressd_fw_stats, ns_id, v->rule, skb->len);
	return v->verdict == VERDICT_DENY ? TCX_DROP : TCX_NEXT;
}

// unparsed judges a packet of namespace ns_id's pod whose transport header was not read.
static __always_inline int unparsed(struct __sk_buff *skb, struct packet *p, __u32 ns_id)
{
	struct verdict v = {};
	if (portless(p, ns_id, &v)) {
		stat_count(&egressd_fw_unparsed, UNPARSED_DROPPED);
		return TCX_DROP;
	}
	stat_count(&egressd_fw_unparsed, UNPARSED_JUDGED);
	return enforce(skb, ns_id, &v);
}

// later_fragment judges a later fragment of namespace ns_id's pod.
static __always_inline int later_fragment(struct __sk_buff *skb, struct packet *p, __u32 ns_id)
{
	struct frag_key k = {};
	frag_key_of(&k, p);
	struct frag_verdict *f = bpf_map_lookup_elem(&egressd_fw_frags, &k);
	struct verdict v = {};
	if (f && bpf_ktime_get_ns() - f->seen_ns < FRAG_TIMEOUT_NS) {
		stat_count(&egressd_fw_frag_stats, FRAG_STAT_FOLLOWED);
		v.rule = f->rule;
		v.verdict = f->verdict;
	} else if (portless(p, ns_id, &v)) {
		stat_count(&egressd_fw_frag_stats, FRAG_STAT_DROPPED);
		return TCX_DROP;
	} else {
		stat_count(&egressd_fw_frag_stats, FRAG_STAT_UNMATCHED);
	}
	return enforce(skb, ns_id, &v);
}

// firewall judges p for namespace ns_id: TCX_DROP or TCX_NEXT. log holds the pod's LOG_* flags.
static __always_inline int firewall(struct __sk_buff *skb, struct packet *p, __u32 ns_id, __u8 log)
{
	if (p->frag == FRAG_LATER)
		return later_fragment(skb, p, ns_id);
	if (p->unparsed)
		return unparsed(skb, p, ns_id);
	__u32 zero = 0;
	__u32 *genp = bpf_map_lookup_elem(&egressd_fw_gen, &zero);
	if (!genp)
		return TCX_NEXT;
	// Read before the lookups: a decision made while the agent writes is stamped with the
	// generation before its increment, so it is stale once the writes are complete.
	__u32 gen = *genp;
	struct verdict_key vk = {.ns_id = ns_id, .dport = p->dport, .proto = p->proto, .family = p->dst.family};
	__builtin_memcpy(vk.dst, p->dst.ip, 16);
	struct verdict v = {.gen = gen};
	__u32 idx = slot_of(&vk);
	struct verdict_slot *slot = bpf_map_lookup_elem(&egressd_fw_verdicts, &idx);
	if (!slot)
		return TCX_NEXT;
	__u64 *a = (__u64 *)&slot->key, *b = (__u64 *)&vk;
	if (slot->v.gen == gen && a[0] == b[0] && a[1] == b[1] && a[2] == b[2]) {
		v = slot->v;
	} else {
		decide(p, ns_id, &v);
		slot->key = vk;
		slot->v = v;
	}
	// Only a drop needs conntrack: the reply of a connection someone else initiated is never
	// filtered (and the rule did not decide its fate, so it is not counted).
	if (v.verdict == VERDICT_DENY && is_reply(skb, p))
		v.verdict = VERDICT_PASS;
	if (p->frag == FRAG_FIRST) {
		struct frag_key fk = {};
		frag_key_of(&fk, p);
		struct frag_verdict fv = {.seen_ns = bpf_ktime_get_ns(), .rule = v.rule, .verdict = v.verdict};
		bpf_map_update_elem(&egressd_fw_frags, &fk, &fv, BPF_ANY);
		stat_count(&egressd_fw_frag_stats, FRAG_STAT_TRACKED);
	}
	if (v.verdict == VERDICT_PASS)
		return TCX_NEXT;
	count(&egressd_fw_stats, ns_id, v.rule, skb->len);
	// Every drop is logged; an allow only when it opens a connection (a line per connection).
	if (v.verdict == VERDICT_DENY ? (log & LOG_DENY) : ((log & LOG_ALLOW) && starts_connection(skb, p)))
		log_verdict(p, ns_id, v.rule, v.verdict);
	return v.verdict == VERDICT_DENY ? TCX_DROP : TCX_NEXT;
}
