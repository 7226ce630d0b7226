// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// EgressQoS: one LPM lookup by (the pod's QoS class, destination) gives the DSCP, which is
// written keeping the ECN bits and fixing the IPv4 checksum.
#pragma once

#include "maps.h"
#include "parse.h"

struct qos_value {
	__u8 dscp;
	__u8 pad;
	__u16 rule;
	__u32 ns_id;
};

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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct stat_key);
	__type(value, struct rule_text);
} egressd_qos_rules SEC(".maps");

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
