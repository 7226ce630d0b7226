// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// The maps and keys every concern shares: local pods, cluster networks, the (id, destination)
// LPM key, per-rule counters, and the names of ids and rules for egressctl.
#pragma once

#include "common.h"

// What of a pod's firewall verdicts its namespace's k8s.ovn.org/acl-logging asks to log.
#define LOG_ALLOW 1
#define LOG_DENY 2

struct pod_info {
	__u32 ns_id;     // 0: no EgressFirewall in the pod's namespace
	__u32 qos_class; // 0: no EgressQoS rule selects the pod
	__u8 log;        // LOG_ALLOW | LOG_DENY
	__u8 spread;     // > 1: one in spread of the pod's flows leaves unsteered (lib/steer.h)
	__u8 pad[2];
	__u32 mark;      // routing mark (within mark_mask) of the pod's egress; 0: none
	__u32 ifindex;   // the host interface facing the pod, where its packets come in (lib/guard.h)
	__u32 port;      // a bridged pod's bridge port (its veth's host side); 0: unknown (lib/guard.h)
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

// Cluster and service networks (and link-scoped destinations): never subject to EgressFirewall.
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 64);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct cluster_key);
	__type(value, __u8);
} egressd_cluster SEC(".maps");

// The family rides in the id's top bit, so that an IPv4 key's id and address fit the 8 bytes
// the kernel's trie compares per step.
#define LPM_ID_V6 0x80000000u

struct lpm_key {
	__u32 prefixlen; // 32 + prefix length: the id is always matched in full
	__u32 id;        // namespace id (firewall) or QoS class (qos), | LPM_ID_V6 for IPv6
	__u8 ip[16];     // IPv4 in the first 4 bytes
};

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

struct stat_key {
	__u32 ns_id;
	__u32 rule;
};

struct counters {
	__u64 packets;
	__u64 bytes;
};

// count adds a packet of len bytes to a rule's counters in a per-CPU map.
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
