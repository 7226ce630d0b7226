// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// egressd's classifier on the host side of every pod-facing interface (tcx ingress), where a
// pod's packets still carry its own source address, before routing, DNAT and masquerade.
// For now it only lets packets continue to the next program; the EgressFirewall, EgressQoS
// and marking logic of DESIGN.md "Packet path" lands here.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// From uapi linux/bpf.h (enum tcx_action_base), newer than Debian 12's headers.
#define TCX_NEXT -1

SEC("tcx/ingress")
int egressd_frompod(struct __sk_buff *skb)
{
	return TCX_NEXT;
}

char __license[] SEC("license") = "Dual BSD/GPL";
