// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Parsing a frame into what the classifier judges it by.
#pragma once

#include "common.h"

struct packet {
	struct addr src, dst;
	__u8 proto;
	__u8 tos;     // IPv4 TOS or IPv6 traffic class
	__u16 sport;  // host order; 0 when absent (fragment, no L4)
	__u16 dport;
	__u8 syn_only; // TCP with SYN and without ACK
	__u32 l3_off;  // offset of the IP header
};

// parse fills p from an Ethernet frame; non-zero when it is not IP or is malformed.
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
