// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Is a packet from a pod the reply of (or related to) a connection someone else initiated?
// TCP and UDP: conntrack (kfuncs). The conntrack kfuncs look up TCP and UDP only (any other
// protocol is -EPROTO), so for ICMP echo and SCTP the classifier keeps its own record of what
// others initiated towards firewalled pods (egressd_fw_inbound, filled by the egress program
// egressd_topod), and ICMP errors are related when the packet they quote is.
#pragma once

#include "parse.h"
#include "maps.h"

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
#define CT_ANY 2 // ct_dir: an entry in either direction

// ct_dir looks up the TCP or UDP tuple (src, dst, ports in host order) in conntrack: the
// direction of the packet in its connection, or -1 when conntrack has none.
static __always_inline int ct_dir(struct __sk_buff *skb, __u8 proto, struct addr *src,
				  struct addr *dst, __u16 sport, __u16 dport)
{
	struct bpf_sock_tuple t = {};
	__u32 len;
	if (src->family == 4) {
		__builtin_memcpy(&t.ipv4.saddr, src->ip, 4);
		__builtin_memcpy(&t.ipv4.daddr, dst->ip, 4);
		t.ipv4.sport = bpf_htons(sport);
		t.ipv4.dport = bpf_htons(dport);
		len = sizeof(t.ipv4);
	} else {
		__builtin_memcpy(t.ipv6.saddr, src->ip, 16);
		__builtin_memcpy(t.ipv6.daddr, dst->ip, 16);
		t.ipv6.sport = bpf_htons(sport);
		t.ipv6.dport = bpf_htons(dport);
		len = sizeof(t.ipv6);
	}
	struct bpf_ct_opts opts = {.netns_id = -1, .l4proto = proto};
	struct nf_conn *ct = bpf_skb_ct_lookup(skb, &t, len, &opts, sizeof(opts));
	if (!ct)
		return -1;
	int dir = opts.dir;
	bpf_ct_release(ct);
	return dir;
}

// What others initiated towards a firewalled pod, for the protocols conntrack's kfuncs cannot
// look up: ICMP echo requests (by id) and SCTP associations (by the INIT chunk), so that the
// pod's echo replies, its SCTP packets of that association and its ICMP errors about them are
// never taken for flows it initiates. Idle entries expire (INBOUND_*_NS); least recently used
// ones are evicted first.
struct inbound_key {
	__u8 proto;    // IPPROTO_ICMP, IPPROTO_ICMPV6 or IPPROTO_SCTP
	__u8 family;
	__u16 pod_port; // SCTP: the pod's port; ICMP: the echo id
	__u16 peer_port; // SCTP: the peer's port; ICMP: 0
	__u16 pad;
	__u8 pod[16];
	__u8 peer[16];
};

#define INBOUND_ICMP_NS (30ull * 1000000000)  // conntrack's ICMP timeout
#define INBOUND_SCTP_NS (210ull * 1000000000) // idle association (heartbeats: every 30 s)

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 65536);
	__type(key, struct inbound_key);
	__type(value, __u64); // when last seen towards the pod (bpf_ktime_get_ns)
} egressd_fw_inbound SEC(".maps");

static __always_inline int inbound_seen(struct inbound_key *k)
{
	__u64 *seen = bpf_map_lookup_elem(&egressd_fw_inbound, k);
	if (!seen)
		return 0;
	__u64 ttl = k->proto == IPPROTO_SCTP_ ? INBOUND_SCTP_NS : INBOUND_ICMP_NS;
	return bpf_ktime_get_ns() - *seen < ttl;
}

// track_inbound records a packet towards a pod (dst) that initiates something conntrack's
// kfuncs cannot look up: an ICMP echo request, or an SCTP INIT; later SCTP packets of a known
// association refresh it.
static __always_inline void track_inbound(struct packet *p)
{
	struct inbound_key k = {.proto = p->proto, .family = p->dst.family};
	__builtin_memcpy(k.pod, p->dst.ip, 16);
	__builtin_memcpy(k.peer, p->src.ip, 16);
	__u64 now = bpf_ktime_get_ns();
	if (p->proto == IPPROTO_SCTP_ && p->l4_off && p->frag != FRAG_LATER) {
		k.pod_port = p->dport;
		k.peer_port = p->sport;
		if (p->sctp_chunk == 1) { // INIT
			bpf_map_update_elem(&egressd_fw_inbound, &k, &now, BPF_ANY);
			return;
		}
		__u64 *seen = bpf_map_lookup_elem(&egressd_fw_inbound, &k);
		if (seen)
			*seen = now;
		return;
	}
	if ((p->icmp_type == ICMP_ECHO && p->proto == IPPROTO_ICMP) ||
	    (p->icmp_type == ICMPV6_ECHO_REQUEST && p->proto == IPPROTO_ICMPV6)) {
		k.pod_port = p->sport; // the echo id
		bpf_map_update_elem(&egressd_fw_inbound, &k, &now, BPF_ANY);
	}
}

// quoted_related says whether the packet an ICMP error of p quotes (sent to the pod: from
// inner src, the peer, to inner dst, the pod) belongs to a connection conntrack or
// egressd_fw_inbound knows.
static __always_inline int quoted_related(struct __sk_buff *skb, struct packet *p)
{
	__u32 off = p->l4_off + 8; // past the ICMP header
	struct addr src = {}, dst = {};
	__u8 proto;
	if (p->src.family == 4) {
		struct iphdr ip;
		if (bpf_skb_load_bytes(skb, off, &ip, sizeof(ip)) || ip.ihl < 5)
			return 0;
		src.family = dst.family = 4;
		__builtin_memcpy(src.ip, &ip.saddr, 4);
		__builtin_memcpy(dst.ip, &ip.daddr, 4);
		proto = ip.protocol;
		off += ip.ihl * 4;
	} else {
		struct ipv6hdr ip6;
		if (bpf_skb_load_bytes(skb, off, &ip6, sizeof(ip6)))
			return 0;
		src.family = dst.family = 6;
		__builtin_memcpy(src.ip, &ip6.saddr, 16);
		__builtin_memcpy(dst.ip, &ip6.daddr, 16);
		proto = ip6.nexthdr; // the quoted packet's extension headers are not walked
		off += sizeof(ip6);
	}
	__u8 l4[8]; // ICMP errors quote at least 8 bytes of L4 header
	if (bpf_skb_load_bytes(skb, off, l4, sizeof(l4)))
		return 0;
	__u16 sport = ((__u16)l4[0] << 8) | l4[1], dport = ((__u16)l4[2] << 8) | l4[3];
	if (proto == IPPROTO_TCP || proto == IPPROTO_UDP)
		return ct_dir(skb, proto, &src, &dst, sport, dport) >= 0;
	struct inbound_key k = {.proto = proto, .family = src.family};
	__builtin_memcpy(k.pod, dst.ip, 16);
	__builtin_memcpy(k.peer, src.ip, 16);
	if (proto == IPPROTO_SCTP_) {
		k.pod_port = dport;
		k.peer_port = sport;
		return inbound_seen(&k);
	}
	if ((proto == IPPROTO_ICMP && l4[0] == ICMP_ECHO) || (proto == IPPROTO_ICMPV6 && l4[0] == ICMPV6_ECHO_REQUEST)) {
		k.pod_port = ((__u16)l4[4] << 8) | l4[5];
		return inbound_seen(&k);
	}
	return 0;
}

static __always_inline int icmp_error(struct packet *p)
{
	if (p->proto == IPPROTO_ICMP && p->src.family == 4)
		return p->icmp_type == ICMP_DEST_UNREACH || p->icmp_type == ICMP_TIME_EXCEEDED ||
		       p->icmp_type == ICMP_PARAMETERPROB;
	if (p->proto == IPPROTO_ICMPV6 && p->src.family == 6)
		return p->icmp_type == ICMPV6_DEST_UNREACH || p->icmp_type == ICMPV6_PKT_TOOBIG ||
		       p->icmp_type == ICMPV6_TIME_EXCEED || p->icmp_type == ICMPV6_PARAMPROB;
	return 0;
}

// is_reply says whether p is the reply of, or an ICMP error related to, a connection someone
// else initiated towards the pod (or, for ICMP errors, any connection conntrack knows).
static __always_inline int is_reply(struct __sk_buff *skb, struct packet *p)
{
	if (p->frag == FRAG_LATER || !p->l4_off)
		return 0; // nothing to look up by (a later fragment follows its first)
	if (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) {
		if (p->syn_only)
			return 0; // a connection's first packet is never a reply: no conntrack lookup
		return ct_dir(skb, p->proto, &p->src, &p->dst, p->sport, p->dport) == IP_CT_DIR_REPLY;
	}
	if (icmp_error(p))
		return quoted_related(skb, p);
	struct inbound_key k = {.proto = p->proto, .family = p->src.family};
	__builtin_memcpy(k.pod, p->src.ip, 16);
	__builtin_memcpy(k.peer, p->dst.ip, 16);
	if (p->proto == IPPROTO_SCTP_) {
		if (p->sctp_chunk == 1)
			return 0; // INIT: the pod initiates
		k.pod_port = p->sport;
		k.peer_port = p->dport;
		return inbound_seen(&k);
	}
	if ((p->proto == IPPROTO_ICMP && p->icmp_type == ICMP_ECHOREPLY) ||
	    (p->proto == IPPROTO_ICMPV6 && p->icmp_type == ICMPV6_ECHO_REPLY)) {
		k.pod_port = p->sport; // the echo id
		return inbound_seen(&k);
	}
	return 0;
}

// starts_connection says whether p, which the firewall allows, opens a connection the pod
// initiates, as conntrack would see it: a TCP SYN, a UDP packet conntrack has no entry for yet
// (the classifier runs before the host's conntrack), an SCTP INIT. ICMP echo requests and
// protocols conntrack tracks no further count each packet.
static __always_inline int starts_connection(struct __sk_buff *skb, struct packet *p)
{
	if (p->frag == FRAG_LATER || !p->l4_off)
		return p->frag != FRAG_LATER;
	if (p->proto == IPPROTO_TCP)
		return p->syn_only;
	if (p->proto == IPPROTO_UDP)
		return ct_dir(skb, p->proto, &p->src, &p->dst, p->sport, p->dport) < 0;
	if (p->proto == IPPROTO_SCTP_)
		return p->sctp_chunk == 1;
	if (p->proto == IPPROTO_ICMP)
		return p->icmp_type == ICMP_ECHO;
	if (p->proto == IPPROTO_ICMPV6)
		return p->icmp_type == ICMPV6_ECHO_REQUEST;
	return 1;
}
