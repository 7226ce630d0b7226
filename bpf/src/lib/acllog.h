// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// ACL logging: firewall verdicts of namespaces that ask for it go to a ring buffer, rate-limited
// per rule, for the agent to write as upstream's ACL log lines: every drop, and an allow once
// per new connection (OVN logs an allow-related ACL when it commits the connection; its later
// packets skip the ACLs).
#pragma once

#include "parse.h"

// A firewall decision: VERDICT_PASS when no rule decides (a cluster destination, or no rule
// matched).
#define VERDICT_PASS 0
#define VERDICT_ALLOW 1
#define VERDICT_DENY 2

// A logged firewall verdict, for the agent to write as an ACL log line.
struct fw_event {
	__u32 ns_id;
	__u16 rule;
	__u8 verdict;
	__u8 proto;
	__u16 sport;
	__u16 dport;
	__u8 family;
	__u8 pad[3];
	__u8 src[16];
	__u8 dst[16];
};

// Emitted into the object's BTF for bpf2go (-type fw_event): the ring buffer has no value type.
const struct fw_event *const unused_fw_event __attribute__((unused)) = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 256 * 1024);
} egressd_fw_log SEC(".maps");

// Logging is rate-limited per rule, like OVN's acl-logging meter (a fair meter: every ACL that
// uses it gets its own bucket): log_rate lines per second for each (namespace, rule), the
// agent's --acl-logging-rate-limit set at load (0 logs nothing), with bursts of as many. The
// buckets are shared by the CPUs and updated without a lock: concurrent packets of one rule
// may each take the last token, a rare line too many rather than a lock on the path.
volatile const __u32 log_rate = 20;

struct log_budget_key {
	__u32 ns_id;
	__u16 rule;
	__u16 pad;
};

struct log_budget {
	__u64 refilled_ns; // when tokens was last refilled
	__u64 tokens;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__uint(max_entries, 65536);
	__type(key, struct log_budget_key);
	__type(value, struct log_budget);
} egressd_fw_log_budget SEC(".maps");

// log_take takes a token of the rule's bucket: 0 when it is empty.
static __always_inline int log_take(__u32 ns_id, __u16 rule)
{
	__u32 rate = log_rate;
	if (!rate)
		return 0;
	struct log_budget_key k = {.ns_id = ns_id, .rule = rule};
	__u64 now = bpf_ktime_get_ns();
	struct log_budget *b = bpf_map_lookup_elem(&egressd_fw_log_budget, &k);
	if (!b) { // a rule's first line: a full bucket, less this one
		struct log_budget fresh = {.refilled_ns = now, .tokens = rate - 1};
		bpf_map_update_elem(&egressd_fw_log_budget, &k, &fresh, BPF_NOEXIST);
		return 1;
	}
	__u64 earned = (now - b->refilled_ns) / (1000000000ull / rate);
	if (earned) {
		b->tokens = b->tokens + earned > rate ? rate : b->tokens + earned;
		b->refilled_ns = now;
	}
	if (!b->tokens)
		return 0;
	b->tokens--;
	return 1;
}

// log_verdict logs that rule of namespace ns_id decided verdict for p, if the rule's bucket
// allows.
static __always_inline void log_verdict(struct packet *p, __u32 ns_id, __u16 rule, __u8 verdict)
{
	if (!log_take(ns_id, rule))
		return;
	struct fw_event e = {.ns_id = ns_id, .rule = rule, .verdict = verdict, .proto = p->proto,
			     .sport = p->dport ? p->sport : 0, .dport = p->dport, .family = p->dst.family}; // ICMP: no ports
	__builtin_memcpy(e.src, p->src.ip, 16);
	__builtin_memcpy(e.dst, p->dst.ip, 16);
	bpf_ringbuf_output(&egressd_fw_log, &e, sizeof(e), 0);
}
