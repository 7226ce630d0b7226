// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Parsing a frame into what the classifier judges it by.
#pragma once

#include "common.h"

// Fragments: a datagram cut in fragments has its ports in the first only.
#define FRAG_NONE 0
#define FRAG_FIRST 1 // offset 0, more to come: has the L4 header
#define FRAG_LATER 2 // offset > 0: no L4 header

// The ICMP and ICMPv6 types the classifier tells apart.
#define ICMP_ECHOREPLY 0
#define ICMP_DEST_UNREACH 3
#define ICMP_ECHO 8
#define ICMP_TIME_EXCEEDED 11
#define ICMP_PARAMETERPROB 12
#define ICMPV6_DEST_UNREACH 1
#define ICMPV6_PKT_TOOBIG 2
#define ICMPV6_TIME_EXCEED 3
#define ICMPV6_PARAMPROB 4
#define ICMPV6_ECHO_REQUEST 128
#define ICMPV6_ECHO_REPLY 129

// How many IPv6 extension headers are walked to find the fragment header and the L4 header.
#define IPV6_EXT_MAX 4

struct packet {
	struct addr src, dst;
	__u8 proto;   // the L4 protocol (after IPv6 extension headers)
	__u8 tos;     // IPv4 TOS or IPv6 traffic class
	__u16 sport;  // host order; 0 when absent (later fragment, no L4); ICMP echo: the id
	__u16 dport;  // host order; 0 when absent
	__u8 syn_only; // TCP with SYN and without ACK
	__u8 frag;     // FRAG_*
	__u8 icmp_type; // ICMP or ICMPv6 type; 0xff when absent
	__u8 sctp_chunk; // SCTP: the first chunk's type
	__u8 unparsed; // the transport header was not read: more IPv6 extension headers than
		       // walked, or cut short; its protocol and ports are unknown
	__u32 frag_id; // fragments: the datagram's identification
	__u32 l3_off;  // offset of the IP header
	__u32 l4_off;  // offset of the L4 header; 0 when absent
};

// parse_l4 reads the ports (TCP, UDP, SCTP) or the ICMP type at offset off.
static __always_inline void parse_l4(struct __sk_buff *skb, struct packet *p, __u32 off)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	int ported = p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP || p->proto == IPPROTO_SCTP_;
	if (off > 512) {
		p->unparsed = ported;
		return;
	}
	void *l4 = data + off;
	if (ported) {
		// Source and destination port lead all three headers; then TCP's flags at 13, SCTP's
		// first chunk type at 12. Read from the linear data, else (headers in the skb's paged
		// part: a VM's tap traffic) copied out; absent only when the packet is cut short.
		__u16 ports[2];
		__u16 *lin = l4;
		if ((void *)(lin + 2) <= end) {
			ports[0] = lin[0];
			ports[1] = lin[1];
		} else if (bpf_skb_load_bytes(skb, off, ports, sizeof(ports))) {
			p->unparsed = 1; // its ports are unknown
			return;
		}
		p->l4_off = off;
		p->sport = bpf_ntohs(ports[0]);
		p->dport = bpf_ntohs(ports[1]);
		__u8 b = 0;
		__u32 at = p->proto == IPPROTO_TCP ? 13 : 12;
		__u8 *lb = l4 + at;
		if ((void *)(lb + 1) <= end)
			b = *lb;
		else if (bpf_skb_load_bytes(skb, off + at, &b, 1))
			b = 0;
		if (p->proto == IPPROTO_TCP)
			p->syn_only = (b & 0x02) && !(b & 0x10); // SYN without ACK
		else if (p->proto == IPPROTO_SCTP_)
			p->sctp_chunk = b;
	} else if ((p->proto == IPPROTO_ICMP && p->src.family == 4) ||
		   (p->proto == IPPROTO_ICMPV6 && p->src.family == 6)) {
		__u8 *icmp = l4; // type, code, checksum, then the echo id
		if ((void *)(icmp + 8) > end)
			return;
		p->l4_off = off;
		p->icmp_type = icmp[0];
		p->sport = bpf_ntohs(*(__u16 *)(icmp + 4));
	}
}

// How much of a frame parse wants in the linear data: Ethernet and an IPv4 header with every
// option, or an IPv6 header (what follows it is copied out when it is not linear).
#define PULL_LEN (14 + 60)

// parse fills p from an Ethernet frame; non-zero when it is not IP or is malformed.
static __always_inline int parse(struct __sk_buff *skb, struct packet *p)
{
	// A frame whose IP header is in the skb's paged part (a tun device's frags) is pulled into
	// the linear data first: else it would pass every check as "not IP". Rare; the common
	// frame costs one comparison.
	__u32 linear = skb->data_end - skb->data;
	if (linear < PULL_LEN && skb->len > linear)
		bpf_skb_pull_data(skb, skb->len < PULL_LEN ? skb->len : PULL_LEN);
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return -1;
	p->l3_off = sizeof(*eth);
	p->icmp_type = 0xff;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end || ip->ihl < 5)
			return -1;
		p->src.family = p->dst.family = 4;
		__builtin_memcpy(p->src.ip, &ip->saddr, 4);
		__builtin_memcpy(p->dst.ip, &ip->daddr, 4);
		p->proto = ip->protocol;
		p->tos = ip->tos;
		if (ip->frag_off & bpf_htons(0x3fff)) { // more fragments, or an offset
			p->frag_id = bpf_ntohs(ip->id);
			if (ip->frag_off & bpf_htons(0x1fff)) {
				p->frag = FRAG_LATER;
				return 0; // no ports
			}
			p->frag = FRAG_FIRST;
		}
		parse_l4(skb, p, sizeof(*eth) + ip->ihl * 4);
		return 0;
	}
	if (eth->h_proto != bpf_htons(ETH_P_IPV6))
		return -1;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	if ((void *)(ip6 + 1) > end)
		return -1;
	p->src.family = p->dst.family = 6;
	__builtin_memcpy(p->src.ip, &ip6->saddr, 16);
	__builtin_memcpy(p->dst.ip, &ip6->daddr, 16);
	p->tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	__u8 next = ip6->nexthdr;
	__u32 off = sizeof(*eth) + sizeof(*ip6);
#pragma unroll
	for (int i = 0; i < IPV6_EXT_MAX; i++) {
		if (next != IPPROTO_HOPOPTS && next != IPPROTO_ROUTING && next != IPPROTO_DSTOPTS &&
		    next != IPPROTO_FRAGMENT && next != IPPROTO_AH)
			break;
		if (off > 512)
			break;
		__u8 h[8] __attribute__((aligned(8))); // its first 8 bytes: linear data, or copied out
		__u8 *lin = data + off;
		if ((void *)(lin + 8) <= end) {
			__builtin_memcpy(h, lin, 8);
		} else if (bpf_skb_load_bytes(skb, off, h, 8)) {
			p->proto = next; // cut short
			p->unparsed = 1;
			return 0;
		}
		if (next == IPPROTO_FRAGMENT) {
			__u16 frag_off = bpf_ntohs(*(__u16 *)(h + 2)); // offset << 3 | M
			next = h[0];
			off += 8;
			if (frag_off & 0xfff9) { // an offset, or more fragments (else an atomic fragment)
				p->frag_id = bpf_ntohl(*(__u32 *)(h + 4));
				if (frag_off & 0xfff8) {
					p->proto = next;
					p->frag = FRAG_LATER;
					return 0;
				}
				p->frag = FRAG_FIRST;
			}
			continue;
		}
		__u32 len = next == IPPROTO_AH ? ((__u32)h[1] + 2) * 4 : ((__u32)h[1] + 1) * 8;
		next = h[0];
		off += len;
	}
	p->proto = next;
	if (next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING || next == IPPROTO_DSTOPTS ||
	    next == IPPROTO_FRAGMENT || next == IPPROTO_AH) {
		p->unparsed = 1; // another extension header past the walk
		return 0;
	}
	parse_l4(skb, p, off);
	return 0;
}
