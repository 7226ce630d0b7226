// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// egressd's classifier on the host side of every pod-facing interface (tcx ingress), where a
// pod's packets still carry its own source address, before routing, DNAT and masquerade.
//
//   1. the source must be a known local pod (egressd_pods), else the packet is not ours;
//   2. EgressFirewall, for flows the pod initiates (a conntrack reply is never dropped) to
//      destinations outside the cluster and service networks (egressd_cluster): one LPM lookup
//      by (namespace, destination) gives the ordered candidate rules for that prefix; the first
//      whose ports match decides; no match allows. The decision per (namespace, destination,
//      protocol, port) is cached per CPU (egressd_fw_verdicts) until the agent next changes the
//      firewall entries (egressd_fw_gen), so that later packets to the same place skip the
//      lookups;
//   3. EgressQoS: one LPM lookup by (the pod's QoS class, destination) gives the DSCP, which is
//      written keeping the ECN bits and fixing the IPv4 checksum;
//   4. per-rule packet and byte counters in per-CPU maps; verdicts of namespaces that ask for
//      ACL logging go to a ring buffer (rate-limited) for the agent to log.
// Every lookup costs the same for 1 rule or 8000: no loop over rules or CIDRs.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// From uapi linux/bpf.h (enum tcx_action_base), newer than Debian 12's headers.
#define TCX_NEXT -1
#define TCX_DROP 2

#define MAX_CANDIDATES 32
#define ACTION_ALLOW 0
#define ACTION_DENY 1
#define IPPROTO_SCTP_ 132

struct addr {
	__u8 family; // 4 or 6
	__u8 pad[3];
	__u8 ip[16]; // IPv4 in the first 4 bytes
};

// What of a pod's firewall verdicts its namespace's k8s.ovn.org/acl-logging asks to log.
#define LOG_ALLOW 1
#define LOG_DENY 2

struct pod_info {
	__u32 ns_id;     // 0: no EgressFirewall in the pod's namespace
	__u32 qos_class; // 0: no EgressQoS rule selects the pod
	__u8 log;        // LOG_ALLOW | LOG_DENY
	__u8 pad[3];
};

// The family rides in the id's top bit, so that an IPv4 key's id and address fit the 8 bytes
// the kernel's trie compares per step.
#define LPM_ID_V6 0x80000000u

struct lpm_key {
	__u32 prefixlen; // 32 + prefix length: the id is always matched in full
	__u32 id;        // namespace id (firewall) or QoS class (qos), | LPM_ID_V6 for IPv6
	__u8 ip[16];     // IPv4 in the first 4 bytes
};

struct candidate {
	__u16 rule;
	__u8 action;
	__u8 has_ports;
};

struct candidates {
	__u32 n;
	struct candidate c[MAX_CANDIDATES];
};

struct port_key {
	__u32 ns_id;
	__u16 rule;
	__u8 proto;
	__u8 pad;
	__u16 port;
	__u16 pad2;
};

struct qos_value {
	__u8 dscp;
	__u8 pad;
	__u16 rule;
	__u32 ns_id;
};

struct stat_key {
	__u32 ns_id;
	__u32 rule;
};

struct counters {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 65536);
	__type(key, struct addr);
	__type(value, struct pod_info);
} egressd_pods SEC(".maps");

struct cluster_key {
	__u32 prefixlen;
	struct addr dst;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 64);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct cluster_key);
	__type(value, __u8);
} egressd_cluster SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_key);
	__type(value, struct candidates);
} egressd_fw SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct port_key);
	__type(value, __u8);
} egressd_fw_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct stat_key);
	__type(value, struct counters);
} egressd_fw_stats SEC(".maps");

// A cached firewall decision. VERDICT_PASS: no rule decides (a cluster destination, or no
// rule matched).
#define VERDICT_PASS 0
#define VERDICT_ALLOW 1
#define VERDICT_DENY 2

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
	__u8 verdict;
	__u8 pad;
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

// A logged firewall verdict, for the agent to write as an ACL log line.
struct fw_event {
	__u32 ns_id;
	__u16 rule;
	__u8 verdict;
	__u8 proto;
	__u16 sport;
	__u16 dport;
	__u8 family;
	__u8 pad[3];
	__u8 src[16];
	__u8 dst[16];
};

// Emitted into the object's BTF for bpf2go (-type fw_event): the ring buffer has no value type.
const struct fw_event *const unused_fw_event __attribute__((unused)) = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 256 * 1024);
} egressd_fw_log SEC(".maps");

// Logging is rate-limited per CPU, like OVN's acl-logging meter: log_rate lines per second (the
// agent's --acl-logging-rate-limit, set at load; 0 logs nothing), with bursts of as many.
volatile const __u32 log_rate = 20;

struct log_budget {
	__u64 refilled_ns; // when tokens was last refilled
	__u64 tokens;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct log_budget);
} egressd_fw_log_budget SEC(".maps");

// The generation of the firewall entries (egressd_fw, egressd_fw_ports, egressd_cluster): the
// agent increments it after changing them, which makes every cached decision stale.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} egressd_fw_gen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_key);
	__type(value, struct qos_value);
} egressd_qos SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct stat_key);
	__type(value, struct counters);
} egressd_qos_stats SEC(".maps");

// What ids and rules stand for, written by the agent for egressctl and bpftool; the program
// never reads them.
struct name {
	__u8 s[64]; // NUL-terminated
};

struct rule_text {
	__u8 s[192]; // NUL-terminated
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct name);
} egressd_ids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct stat_key);
	__type(value, struct rule_text);
} egressd_fw_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct stat_key);
	__type(value, struct rule_text);
} egressd_qos_rules SEC(".maps");

// Conntrack lookup (kfuncs); the layout of bpf_ct_opts is the kernel's (16 bytes).
// Opaque to us, but a complete type: kfunc signatures are checked against the kernel BTF.
struct nf_conn {
} __attribute__((preserve_access_index));
struct bpf_ct_opts {
	__s32 netns_id;
	__s32 error;
	__u8 l4proto;
	__u8 dir;
	__u16 ct_zone_id;
	__u8 ct_zone_dir;
	__u8 reserved[3];
};
extern struct nf_conn *bpf_skb_ct_lookup(struct __sk_buff *, struct bpf_sock_tuple *, __u32,
					 struct bpf_ct_opts *, __u32) __ksym;
extern void bpf_ct_release(struct nf_conn *) __ksym;
#define IP_CT_DIR_REPLY 1

struct packet {
	struct addr src, dst;
	__u8 proto;
	__u8 tos;     // IPv4 TOS or IPv6 traffic class
	__u16 sport;  // host order; 0 when absent (fragment, no L4)
	__u16 dport;
	__u8 syn_only; // TCP with SYN and without ACK
	__u32 l3_off;  // offset of the IP header
};

static __always_inline void count(void *map, __u32 ns_id, __u32 rule, __u64 len)
{
	struct stat_key k = {.ns_id = ns_id, .rule = rule};
	struct counters *c = bpf_map_lookup_elem(map, &k);
	if (c) {
		c->packets++;
		c->bytes += len;
	} else {
		struct counters init = {.packets = 1, .bytes = len};
		bpf_map_update_elem(map, &k, &init, BPF_NOEXIST);
	}
}

static __always_inline int parse(struct __sk_buff *skb, struct packet *p)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return -1;
	p->l3_off = sizeof(*eth);
	void *l4;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end || ip->ihl < 5)
			return -1;
		p->src.family = p->dst.family = 4;
		__builtin_memcpy(p->src.ip, &ip->saddr, 4);
		__builtin_memcpy(p->dst.ip, &ip->daddr, 4);
		p->proto = ip->protocol;
		p->tos = ip->tos;
		if (ip->frag_off & bpf_htons(0x1fff))
			return 0; // a later fragment: no ports
		l4 = (void *)ip + ip->ihl * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return -1;
		p->src.family = p->dst.family = 6;
		__builtin_memcpy(p->src.ip, &ip6->saddr, 16);
		__builtin_memcpy(p->dst.ip, &ip6->daddr, 16);
		p->proto = ip6->nexthdr; // extension headers: no ports, CIDR rules still apply
		p->tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
		l4 = ip6 + 1;
	} else {
		return -1;
	}
	if (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP || p->proto == IPPROTO_SCTP_) {
		__u16 *ports = l4; // source and destination port lead all three headers
		if ((void *)(ports + 2) > end)
			return 0; // truncated: no ports, so only rules without ports can match it
		p->sport = bpf_ntohs(ports[0]);
		p->dport = bpf_ntohs(ports[1]);
		struct tcphdr *tcp = l4;
		if (p->proto == IPPROTO_TCP && (void *)(tcp + 1) <= end)
			p->syn_only = tcp->syn && !tcp->ack;
	}
	return 0;
}

// is_reply says whether conntrack knows this packet as the reply direction of a connection
// someone else initiated towards the pod.
static __always_inline int is_reply(struct __sk_buff *skb, struct packet *p)
{
	if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP)
		return 0;
	if (p->syn_only)
		return 0; // a connection's first packet is never a reply: no conntrack lookup
	struct bpf_sock_tuple t = {};
	__u32 len;
	if (p->src.family == 4) {
		__builtin_memcpy(&t.ipv4.saddr, p->src.ip, 4);
		__builtin_memcpy(&t.ipv4.daddr, p->dst.ip, 4);
		t.ipv4.sport = bpf_htons(p->sport);
		t.ipv4.dport = bpf_htons(p->dport);
		len = sizeof(t.ipv4);
	} else {
		__builtin_memcpy(t.ipv6.saddr, p->src.ip, 16);
		__builtin_memcpy(t.ipv6.daddr, p->dst.ip, 16);
		t.ipv6.sport = bpf_htons(p->sport);
		t.ipv6.dport = bpf_htons(p->dport);
		len = sizeof(t.ipv6);
	}
	struct bpf_ct_opts opts = {.netns_id = -1, .l4proto = p->proto};
	struct nf_conn *ct = bpf_skb_ct_lookup(skb, &t, len, &opts, sizeof(opts));
	if (!ct)
		return 0;
	int reply = opts.dir == IP_CT_DIR_REPLY;
	bpf_ct_release(ct);
	return reply;
}

static __always_inline void lpm_key_of(struct lpm_key *k, __u32 id, struct addr *dst)
{
	if (dst->family == 4) {
		k->prefixlen = 32 + 32;
		k->id = id;
		__builtin_memcpy(k->ip, dst->ip, 4);
	} else {
		k->prefixlen = 32 + 128;
		k->id = id | LPM_ID_V6;
		__builtin_memcpy(k->ip, dst->ip, 16);
	}
}

// decide evaluates the firewall of namespace ns_id for p into v.
static __always_inline void decide(struct packet *p, __u32 ns_id, struct verdict *v)
{
	struct cluster_key ck = {.prefixlen = 32 + (p->dst.family == 4 ? 32 : 128), .dst = p->dst};
	if (bpf_map_lookup_elem(&egressd_cluster, &ck))
		return;
	struct lpm_key k = {};
	lpm_key_of(&k, ns_id, &p->dst);
	struct candidates *cs = bpf_map_lookup_elem(&egressd_fw, &k);
	if (!cs)
		return;
	__u32 n = cs->n;
	for (__u32 i = 0; i < MAX_CANDIDATES; i++) {
		if (i >= n)
			break;
		struct candidate c = cs->c[i];
		if (c.has_ports) {
			struct port_key pk = {.ns_id = ns_id, .rule = c.rule, .proto = p->proto, .port = p->dport};
			if (!p->dport || !bpf_map_lookup_elem(&egressd_fw_ports, &pk))
				continue;
		}
		v->rule = c.rule;
		v->verdict = c.action == ACTION_DENY ? VERDICT_DENY : VERDICT_ALLOW;
		return;
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

static __always_inline void log_verdict(struct packet *p, __u32 ns_id, struct verdict *v)
{
	__u32 zero = 0;
	struct log_budget *b = bpf_map_lookup_elem(&egressd_fw_log_budget, &zero);
	if (!b)
		return;
	__u32 rate = log_rate;
	if (!rate)
		return;
	__u64 now = bpf_ktime_get_ns();
	__u64 earned = (now - b->refilled_ns) / (1000000000ull / rate);
	if (earned) {
		b->tokens = b->tokens + earned > rate ? rate : b->tokens + earned;
		b->refilled_ns = now;
	}
	if (!b->tokens)
		return;
	b->tokens--;
	struct fw_event e = {.ns_id = ns_id, .rule = v->rule, .verdict = v->verdict, .proto = p->proto,
			     .sport = p->sport, .dport = p->dport, .family = p->dst.family};
	__builtin_memcpy(e.src, p->src.ip, 16);
	__builtin_memcpy(e.dst, p->dst.ip, 16);
	bpf_ringbuf_output(&egressd_fw_log, &e, sizeof(e), 0);
}

static __always_inline int firewall(struct __sk_buff *skb, struct packet *p, __u32 ns_id, __u8 log)
{
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
	if (v.verdict == VERDICT_PASS)
		return TCX_NEXT;
	// Only a drop needs conntrack: the reply of a connection someone else initiated is never
	// filtered (and the rule did not decide its fate, so it is not counted).
	if (v.verdict == VERDICT_DENY && is_reply(skb, p))
		return TCX_NEXT;
	count(&egressd_fw_stats, ns_id, v.rule, skb->len);
	if (log & (v.verdict == VERDICT_DENY ? LOG_DENY : LOG_ALLOW))
		log_verdict(p, ns_id, &v);
	return v.verdict == VERDICT_DENY ? TCX_DROP : TCX_NEXT;
}

static __always_inline void qos(struct __sk_buff *skb, struct packet *p, __u32 class)
{
	struct lpm_key k = {};
	lpm_key_of(&k, class, &p->dst);
	struct qos_value *v = bpf_map_lookup_elem(&egressd_qos, &k);
	if (!v)
		return;
	count(&egressd_qos_stats, v->ns_id, v->rule, skb->len);
	__u8 tos = (v->dscp << 2) | (p->tos & 3);
	if (tos == p->tos)
		return;
	if (p->dst.family == 4) {
		// The 16-bit word holding version/IHL and TOS, before and after, for the checksum.
		__u8 vihl;
		if (bpf_skb_load_bytes(skb, p->l3_off, &vihl, 1))
			return;
		__u16 old = bpf_htons(((__u16)vihl << 8) | p->tos);
		__u16 new = bpf_htons(((__u16)vihl << 8) | tos);
		bpf_l3_csum_replace(skb, p->l3_off + offsetof(struct iphdr, check), old, new, 2);
		bpf_skb_store_bytes(skb, p->l3_off + offsetof(struct iphdr, tos), &tos, 1, 0);
	} else {
		__u8 b[2];
		if (bpf_skb_load_bytes(skb, p->l3_off, b, 2))
			return;
		b[0] = (b[0] & 0xf0) | (tos >> 4);
		b[1] = (b[1] & 0x0f) | (tos << 4);
		bpf_skb_store_bytes(skb, p->l3_off, b, 2, 0);
	}
}

SEC("tcx/ingress")
int egressd_frompod(struct __sk_buff *skb)
{
	struct packet p = {};
	if (parse(skb, &p))
		return TCX_NEXT; // not IP, or malformed: not ours to judge
	struct pod_info *pod = bpf_map_lookup_elem(&egressd_pods, &p.src);
	if (!pod)
		return TCX_NEXT;
	__u32 ns_id = pod->ns_id, class = pod->qos_class;
	if (ns_id && firewall(skb, &p, ns_id, pod->log) == TCX_DROP)
		return TCX_DROP;
	if (class)
		qos(skb, &p, class);
	return TCX_NEXT;
}

char __license[] SEC("license") = "Dual BSD/GPL";
