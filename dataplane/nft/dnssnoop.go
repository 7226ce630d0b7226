package nft

import (
	"encoding/binary"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// EgressFirewall's dnsName learning: the DNS answers to the local pods of namespaces with
// dnsName rules go to an NFQUEUE that the agent reads; it installs the answered addresses, then
// lets the answer go on. The kernel holds the packet until the verdict, so the pod's connection
// to an answered address finds it already allowed (Cilium's and Calico's DNS policies get there
// by proxying DNS instead). An answer is a reply packet of a UDP or TCP connection whose original
// destination port is 53: a resolver reached directly, or through a Service whose DNAT maps
// port 53 to another target port. It is forwarded to the pod from a resolver elsewhere
// (forward_filter), or sent by one on the node itself, a node-local DNS cache on hostNetwork
// (output_filter).
//
// The queue has the bypass flag: with no agent reading it, answers pass (the firewall still
// judges the connections). A packet the agent accepts, or that bypasses the queue, goes on to the
// hook's next base chain and skips the rest of this one, so dns_snoop is the last jump of a base
// chain. Its rules are written only while it is in use. A kernel without nft's queue expression
// (CONFIG_NFT_QUEUE; some distributions' kernels, the 6.18 of our CI) would refuse them, and with
// them the whole table: New tries the expression once, and where the kernel refuses it the rules
// end in the xtables NFQUEUE target instead (nft_compat), which queues the same way; nft then
// lists it as iptables translates it ("queue num <n> bypass", with a warning that the table is
// managed by iptables-nft).

const (
	dnsPods4Set      = "dns_pods4"
	dnsPods6Set      = "dns_pods6"
	dnsResolvers4Set = "dns_resolvers4"
	dnsResolvers6Set = "dns_resolvers6"
	dnsSnoopChain    = "dns_snoop"
	dnsPort          = 53
)

// dnsSnoopSets are the local pods whose DNS answers are queued.
var dnsSnoopSets = []*nftables.Set{
	{Table: table, Name: dnsPods4Set, KeyType: nftables.TypeIPAddr},
	{Table: table, Name: dnsPods6Set, KeyType: nftables.TypeIP6Addr},
	{Table: table, Name: dnsResolvers4Set, KeyType: nftables.TypeIPAddr},
	{Table: table, Name: dnsResolvers6Set, KeyType: nftables.TypeIP6Addr},
}

// addDNSSnoop adds the pods whose DNS answers are queued to the wanted contents.
func addDNSSnoop(c contents, s *dataplane.NftablesState) {
	for _, sp := range s.DNSSnoop.Pods {
		if p := sp.IP.Unmap(); p.IsValid() {
			c.add(family(p, dnsPods4Set, dnsPods6Set), string(p.AsSlice()), "")
		}
	}
	if len(s.DNSSnoop.Pods) == 0 {
		return // no resolver elements either: the chain is in use while there are pods
	}
	for _, r := range s.DNSSnoop.Resolvers {
		if r = r.Unmap(); r.IsValid() {
			c.add(family(r, dnsResolvers4Set, dnsResolvers6Set), string(r.AsSlice()), "")
		}
	}
}

// dnsQueue is the queue the answers go to, and how.
type dnsQueue struct {
	num    uint16
	compat bool // the xtables NFQUEUE target, not nft's queue expression
}

// verdict sends the packet to the queue, or lets it pass when nothing reads the queue.
func (q dnsQueue) verdict() expr.Any {
	if !q.compat {
		return &expr.Queue{Num: q.num, Flag: expr.QueueFlagBypass}
	}
	// struct xt_NFQ_info_v3: queuenum, queues_total, flags (NFQ_FLAG_BYPASS), padded to 8.
	info := make(xt.Unknown, 8)
	binary.NativeEndian.PutUint16(info[0:], q.num)
	binary.NativeEndian.PutUint16(info[2:], 1)
	binary.NativeEndian.PutUint16(info[4:], 1)
	return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &info}
}

// nativeQueue tells whether the kernel takes nft's queue expression: a probe table with such a
// rule, deleted in the same transaction (refused whole, or leaving nothing).
func nativeQueue(c *nftables.Conn) bool {
	probe := &nftables.Table{Name: "egressd_queue_probe", Family: nftables.TableFamilyINet}
	c.AddTable(probe)
	ch := c.AddChain(&nftables.Chain{Name: "probe", Table: probe})
	c.AddRule(&nftables.Rule{Table: probe, Chain: ch, Exprs: []expr.Any{dnsQueue{}.verdict()}})
	c.DelTable(probe)
	return c.Flush() == nil
}

// dnsSnoopRules, per family and transport (udp, tcp):
//
//	ct direction reply meta l4proto udp ct original proto-dst 53
//	ip saddr @dns_resolvers4 ip daddr @dns_pods4 queue flags bypass to <queue>
func dnsSnoopRules(queue dnsQueue, sets map[string]*nftables.Set) [][]expr.Any {
	var rules [][]expr.Any
	for _, v4 := range []bool{true, false} {
		pods, resolvers := sets[dnsPods6Set], sets[dnsResolvers6Set]
		if v4 {
			pods, resolvers = sets[dnsPods4Set], sets[dnsResolvers4Set]
		}
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			rules = append(rules, slices.Concat(nfproto(v4), ctDirection(ctDirReply), []expr.Any{
				// The protocol before the port, which nft lists by it.
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
				// google/nftables sends the direction as a 32-bit attribute where the kernel
				// reads 8 bits: only the original direction (0) reads right, which is the one
				// whose destination port is the resolver's.
				&expr.Ct{Register: 1, Key: expr.CtKeyPROTODST, Direction: ctDirOriginal},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, dnsPort}},
				// The server that answers: before the reply's un-DNAT (at postrouting), a Service's
				// endpoint. (Not ct original ip daddr: google/nftables cannot send the direction
				// of its per-family keys, and nft list cannot print the generic one in inet.)
				addrField(v4, true, 1), lookup(resolvers, 1, false),
				addrField(v4, false, 1), lookup(pods, 1, false),
				queue.verdict(),
			}))
		}
	}
	return rules
}
