// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Steering: a pod whose egress is routed by policy (EgressIP, external gateways,
// EgressService) gets its routing mark in skb->mark, inside mark_mask only, so that the marks of
// the CNI and kube-proxy are kept; ip rules (fwmark/mask) then pick its route. Destinations in
// egressd_steer_exempt (cluster networks, node addresses) are never steered.
#pragma once

#include "maps.h"
#include "parse.h"

// The bits of skb->mark egressd owns (the agent's mark mask, set at load).
volatile const __u32 mark_mask = 0x00ff0000;

// Destinations never steered: same keys as egressd_cluster. Node addresses of every node, so
// room for large clusters (no preallocation: the entries only cost what is written).
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct cluster_key);
	__type(value, __u8);
} egressd_steer_exempt SEC(".maps");

// spread_here tells whether the packet's flow is one of a pod's flows that leave from this node
// unmarked: one in spread of them (this node is an egress node of the pod's EgressIP, with
// spread - 1 others), chosen by the flow's hash, the same for every packet of the flow.
static __always_inline int spread_here(struct __sk_buff *skb, __u8 spread)
{
	return spread > 1 && bpf_get_hash_recalc(skb) % spread == 0;
}

// steer writes mark (non-zero) into skb->mark's bits of mark_mask unless p's destination is
// exempt.
static __always_inline void steer(struct __sk_buff *skb, struct packet *p, __u32 mark)
{
	struct cluster_key k = {.prefixlen = 32 + (p->dst.family == 4 ? 32 : 128), .dst = p->dst};
	if (bpf_map_lookup_elem(&egressd_steer_exempt, &k))
		return;
	__u32 mask = mark_mask;
	skb->mark = (skb->mark & ~mask) | (mark & mask);
}
