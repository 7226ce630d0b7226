// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// egressd's classifier on the host side of every pod-facing interface (tcx ingress), where a
// pod's packets still carry its own source address, before routing, DNAT and masquerade.
//
//   1. the source must be a known local pod (egressd_pods), else the packet is not ours; on an
//      interface that faces only pods, it must be a pod behind that interface, else the packet
//      is forged and dropped (lib/guard.h);
//   2. EgressFirewall (lib/firewall.h): new flows to destinations outside the cluster are
//      allowed or dropped by the namespace's first matching rule, decisions cached per CPU;
//   3. EgressQoS (lib/qos.h): the DSCP of the pod's QoS class for the destination;
//   4. steering (lib/steer.h): once the firewall let it through, every packet of a pod with a
//      routing mark gets it in skb->mark (within the mark mask), unless its destination is
//      exempt (cluster networks, node addresses) or its flow is one of those a pod on an
//      egress node sends out from there (spread_here);
//   5. per-rule packet and byte counters in per-CPU maps (lib/maps.h); verdicts of namespaces
//      that ask for ACL logging go to a ring buffer (drops, and allows once per connection),
//      rate-limited per rule (lib/acllog.h).
//   6. later fragments follow the verdict of their datagram's first (lib/firewall.h).
// And egressd_topod, on egress towards the pods, records what others initiate over protocols
// conntrack's kfuncs cannot look up (ICMP echo, SCTP), for step 2 to tell replies.
// Every lookup costs the same for 1 rule or 8000: no loop over rules or CIDRs.

#include "lib/common.h"
#include "lib/parse.h"
#include "lib/maps.h"
#include "lib/firewall.h"
#include "lib/qos.h"
#include "lib/steer.h"
#include "lib/guard.h"

SEC("tcx/ingress")
int egressd_frompod(struct __sk_buff *skb)
{
	struct packet p = {};
	if (parse(skb, &p))
		return TCX_NEXT; // not IP, or malformed: not ours to judge
	struct pod_info *pod = bpf_map_lookup_elem(&egressd_pods, &p.src);
	if (spoofed(skb, &p, pod))
		return TCX_DROP;
	if (!pod)
		return TCX_NEXT;
	__u32 ns_id = pod->ns_id, class = pod->qos_class, mark = pod->mark;
	__u8 spread = pod->spread;
	if (ns_id && firewall(skb, &p, ns_id, pod->log) == TCX_DROP)
		return TCX_DROP; // never steered
	if (class)
		qos(skb, &p, class);
	if (mark && !spread_here(skb, spread))
		steer(skb, &p, mark);
	return TCX_NEXT;
}

// On the same interfaces, egress (towards the pods): what others initiate towards a firewalled
// pod over protocols conntrack's kfuncs cannot look up (ICMP echo, SCTP) is recorded, so that the
// pod's replies pass (lib/conntrack.h). Never drops, never changes a packet.
SEC("tcx/egress")
int egressd_topod(struct __sk_buff *skb)
{
	struct packet p = {};
	if (parse(skb, &p))
		return TCX_NEXT;
	if (p.proto != IPPROTO_SCTP_ && p.proto != IPPROTO_ICMP && p.proto != IPPROTO_ICMPV6)
		return TCX_NEXT;
	struct pod_info *pod = bpf_map_lookup_elem(&egressd_pods, &p.dst);
	if (pod && pod->ns_id)
		track_inbound(&p);
	return TCX_NEXT;
}

// On each port of a bridge that faces pods alone (the host side of a pod's veth), tcx ingress: a
// frame must carry an address of the pod behind that port (lib/guard.h) as its IP source, as
// the target of a neighbour advertisement and as an ARP sender, else it is dropped before the
// bridge forwards it, to the node or to a neighbour. Never changes a frame.
SEC("tcx/ingress")
int egressd_fromport(struct __sk_buff *skb)
{
	struct packet p = {};
	struct addr a = {};
	if (!parse(skb, &p)) {
		if (port_spoofed(skb, &p.src))
			return TCX_DROP;
		return !nd_target(skb, &p, &a) && port_spoofed(skb, &a) ? TCX_DROP : TCX_NEXT;
	}
	if (arp_sender(skb, &a))
		return TCX_NEXT; // neither IP nor ARP: the bridge's own guard sees what reaches the node
	return port_spoofed(skb, &a) ? TCX_DROP : TCX_NEXT;
}

char __license[] SEC("license") = "Dual BSD/GPL";
