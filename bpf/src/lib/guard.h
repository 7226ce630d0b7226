// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Anti-spoofing, as OVN's port security: on an interface that faces only pods (a pod's veth, or
// a bridge whose every port is a veth; the agent lists them in egressd_guarded), a packet must
// carry the address of a pod behind that very interface. One with an address no local pod has
// (an unused address of the subnet), or with a pod's behind another interface, is dropped
// before the firewall could be fooled by it, whatever the pod's policies. IPv6 link-local and
// unspecified sources pass: neighbour discovery needs them, and they are never routed. A bridge
// of veths is guarded at each of its ports as well (port_spoofed), where a pod is told from its
// neighbours on the same bridge, ARP included.
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

// The bridge ports (ifindex) behind which a pod is known (pod_info.port): only that pod's
// addresses pass there (egressd_fromport).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);  // ifindex
	__type(value, __u8); // 1
} egressd_ports SEC(".maps");

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

static __always_inline int count_spoofed(__u32 reason)
{
	__u64 *n = bpf_map_lookup_elem(&egressd_spoofed, &reason);
	if (n)
		(*n)++;
	return 1;
}

// spoofed reports (and counts) whether the packet, from pod (NULL: no local pod has its source),
// came in on a guarded interface that pod is not behind.
static __always_inline int spoofed(struct __sk_buff *skb, struct packet *p, struct pod_info *pod)
{
	__u32 ifindex = skb->ingress_ifindex;
	if (!bpf_map_lookup_elem(&egressd_guarded, &ifindex))
		return 0;
	if (!pod)
		return link_local_or_unspecified(&p->src) ? 0 : count_spoofed(SPOOF_UNKNOWN);
	return pod->ifindex != ifindex ? count_spoofed(SPOOF_OTHER_POD) : 0;
}

// arp_sender reads the sender's address of an ARP message (Ethernet, IPv4) into src; non-zero
// for any other frame.
static __always_inline int arp_sender(struct __sk_buff *skb, struct addr *src)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_ARP))
		return -1;
	__u8 *arp = (void *)(eth + 1); // htype 1, ptype IPv4, hlen 6, plen 4; then sha, spa
	if ((void *)(arp + 18) > end || arp[0] != 0 || arp[1] != 1 || arp[2] != 0x08 || arp[3] != 0 ||
	    arp[4] != 6 || arp[5] != 4)
		return -1;
	src->family = 4;
	return bpf_skb_load_bytes(skb, sizeof(*eth) + 14, src->ip, 4);
}

// ICMPv6 neighbour advertisement: its target address follows type, code, checksum and flags.
#define ND_NEIGHBOR_ADVERT 136
#define ND_TARGET_OFF 8

// nd_target reads the target of an IPv6 neighbour advertisement p into t (what it claims a MAC
// for, as ARP's sender address does); non-zero for any other packet.
static __always_inline int nd_target(struct __sk_buff *skb, struct packet *p, struct addr *t)
{
	if (p->src.family != 6 || p->proto != IPPROTO_ICMPV6 || p->icmp_type != ND_NEIGHBOR_ADVERT || !p->l4_off)
		return -1;
	t->family = 6;
	return bpf_skb_load_bytes(skb, p->l4_off + ND_TARGET_OFF, t->ip, 16);
}

// port_spoofed reports (and counts) whether a frame that came in on a bridge port carries a
// source that is not the address of the pod behind that port (egressd_fromport): the bridge's
// own guard above sees every port's frames as the bridge's, so it cannot tell a pod from its
// neighbour. A pod whose port is unknown (0: not added while egressd-cni was chained) passes on
// a port no known pod is behind; unspecified and IPv6 link-local sources pass (ARP probes,
// duplicate address detection, neighbour discovery).
static __always_inline int port_spoofed(struct __sk_buff *skb, struct addr *src)
{
	if (src->family == 4 && !(src->ip[0] | src->ip[1] | src->ip[2] | src->ip[3]))
		return 0;
	if (link_local_or_unspecified(src))
		return 0;
	__u32 port = skb->ifindex;
	struct pod_info *pod = bpf_map_lookup_elem(&egressd_pods, src);
	if (!pod)
		return count_spoofed(SPOOF_UNKNOWN);
	if (pod->port == port || (!pod->port && !bpf_map_lookup_elem(&egressd_ports, &port)))
		return 0;
	return count_spoofed(SPOOF_OTHER_POD);
}
