// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// EgressFirewall, for flows the pod initiates (a conntrack reply is never dropped) to
// destinations outside the cluster and service networks (egressd_cluster): one LPM lookup by
// (namespace, destination) gives the ordered candidate rules for that prefix; the first whose
// ports match decides; no match allows. The decision per (namespace, destination, protocol,
// port) is cached per CPU (egressd_fw_verdicts) until the agent next changes the firewall
// entries (egressd_fw_gen), so that later packets to the same place skip the lookups.
#pragma once

#include "maps.h"
#include "parse.h"
#include "conntrack.h"
#include "acllog.h"

#define MAX_CANDIDATES 32
#define ACTION_ALLOW 0
#define ACTION_DENY 1

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

// The generation of the firewall entries (egressd_fw, egressd_fw_ports, egressd_cluster): the
// agent increments it after changing them, which makes every cached decision stale.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} egressd_fw_gen SEC(".maps");

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

// firewall judges p for namespace ns_id: TCX_DROP or TCX_NEXT. log holds the pod's LOG_* flags.
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
		log_verdict(p, ns_id, v.rule, v.verdict);
	return v.verdict == VERDICT_DENY ? TCX_DROP : TCX_NEXT;
}
