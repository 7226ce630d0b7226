// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Anti-spoofing, as OVN's port security: on an interface that faces only pods (a pod's veth, or
// a bridge whose every port is a veth; the agent lists them in egressd_guarded), a packet must
// carry the address of a pod behind that very interface. One with an address no local pod has
// (an unused address of the subnet), or with a pod's behind another interface, is dropped
// before the firewall could be fooled by it, whatever the pod's policies. IPv6 link-local and
// unspecified sources pass: neighbour discovery needs them, and they are never routed.
#pragma once

#include "common.h"
#include "maps.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);  // ifindex
	__type(value, __u8); // 1
} egressd_guarded SEC(".maps");

// Dropped packets, per CPU, by reason (indices):
#define SPOOF_UNKNOWN 0   // a source no pod of the node has
#define SPOOF_OTHER_POD 1 // a source of a pod behind another interface
#define SPOOF_STATS 2

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, SPOOF_STATS);
	__type(key, __u32);
	__type(value, __u64);
} egressd_spoofed SEC(".maps");

static __always_inline int link_local_or_unspecified(struct addr *a)
{
	if (a->family != 6)
		return 0;
	if (a->ip[0] == 0xfe && (a->ip[1] & 0xc0) == 0x80)
		return 1;
	__u8 any = 0;
#pragma unroll
	for (int i = 0; i < 16; i++)
		any |= a->ip[i];
	return !any;
}

// spoofed reports (and counts) whether the packet, from pod (NULL: no local pod has its source),
// came in on a guarded interface that pod is not behind.
static __always_inline int spoofed(struct __sk_buff *skb, struct packet *p, struct pod_info *pod)
{
	__u32 ifindex = skb->ingress_ifindex;
	if (!bpf_map_lookup_elem(&egressd_guarded, &ifindex))
		return 0;
	__u32 reason;
	if (!pod) {
		if (link_local_or_unspecified(&p->src))
			return 0;
		reason = SPOOF_UNKNOWN;
	} else if (pod->ifindex != ifindex) {
		reason = SPOOF_OTHER_POD;
	} else {
		return 0;
	}
	__u64 *n = bpf_map_lookup_elem(&egressd_spoofed, &reason);
	if (n)
		(*n)++;
	return 1;
}
