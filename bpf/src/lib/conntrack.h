// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Conntrack lookup (kfuncs): is a packet the reply of a connection someone else initiated?
#pragma once

#include "parse.h"

// The layout of bpf_ct_opts is the kernel's (16 bytes). nf_conn is opaque to us, but a
// complete type: kfunc signatures are checked against the kernel BTF.
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
