package nft

import (
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
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
// chain. Its rules are written only while it is in use: a kernel without nft's queue expression
// (CONFIG_NFT_QUEUE) refuses them, and with them the whole table.

const (
	dnsPods4Set   = "dns_pods4"
	dnsPods6Set   = "dns_pods6"
	dnsSnoopChain = "dns_snoop"
	dnsPort       = 53
)

// dnsSnoopSets are the local pods whose DNS answers are queued.
var dnsSnoopSets = []*nftables.Set{
	{Table: table, Name: dnsPods4Set, KeyType: nftables.TypeIPAddr},
	{Table: table, Name: dnsPods6Set, KeyType: nftables.TypeIP6Addr},
}

// addDNSSnoop adds the pods whose DNS answers are queued to the wanted contents.
func addDNSSnoop(c contents, s *dataplane.NftablesState) {
	for _, p := range s.DNSSnoop.Pods {
		if p = p.Unmap(); p.IsValid() {
			c.add(family(p, dnsPods4Set, dnsPods6Set), string(p.AsSlice()), "", nftables.SetElement{Key: p.AsSlice()})
		}
	}
}

// queueVerdict sends the packet to queue num, or lets it pass when nothing reads the queue.
var queueVerdict = func(num uint16) expr.Any { return &expr.Queue{Num: num, Flag: expr.QueueFlagBypass} }

// dnsSnoopRules, per family and transport (udp, tcp):
//
//	ct direction reply meta l4proto udp ct original proto-dst 53 ip daddr @dns_pods4
//	queue flags bypass to <queue>
func dnsSnoopRules(queue uint16, sets map[string]*nftables.Set) [][]expr.Any {
	var rules [][]expr.Any
	for _, v4 := range []bool{true, false} {
		pods := sets[dnsPods6Set]
		if v4 {
			pods = sets[dnsPods4Set]
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
				addrField(v4, false, 1), lookup(pods, 1, false),
				queueVerdict(queue),
			}))
		}
	}
	return rules
}
