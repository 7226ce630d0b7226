package nft

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/egressd/egressd/dataplane"
)

// Steering of what the classifier left unmarked. The classifier steers a local pod's packets
// before DNAT, so it sees a Service address, exempt as a cluster network, where the backend may
// be outside the cluster (an external database behind a selectorless Service; the API server of
// a managed control plane behind the kubernetes Service). Upstream's reroute policies match
// after OVN's load balancer and send such a connection to the egress node (or gateway, or
// EgressService host); here, a local steered pod's DNATed packet to a destination outside the
// exempt ones that is still unmarked gets the pod's mark after DNAT and before the routing
// decision. Its guard would otherwise drop it (nothing steered nor SNATed it). The packets of
// other nodes' pods that this node SNATs to an egress IP on a secondary network arrive from the
// wire, where no classifier saw them: they get their mark (which selects the table of that IP's
// interface) the same way, DNATed here or not. (A pod reaching this node's NodePort whose
// backend is outside leaves with the egress IP, as it does on an egress IP of the primary
// network: upstream exempts pod to node traffic and SNATs it to the node's address; egressd
// SNATs by the destination after DNAT. Not marking it would only send it out of the wrong NIC.)
//
// As for the return paths (returnpaths.go), the mark cannot be OR-ed from a map: the maps are
// verdict maps to one chain per mark, steer_mark_<mark>, which sets that constant under the
// steering mask and keeps the other bits.

const (
	steerPods4Set   = "steer_pods4" // local pod : jump steer_mark_<mark>
	steerPods6Set   = "steer_pods6"
	steerRemote4Set = "steer_remote4" // another node's pod : jump steer_mark_<mark>
	steerRemote6Set = "steer_remote6"
	replyPods4Set   = "egressip_reply_pods4" // another node's pod SNATed here : jump steer_mark_<mark>
	replyPods6Set   = "egressip_reply_pods6"
	steerPodsChain  = "steer_unmarked"
	// steerRepliesChain marks the replies to other nodes' pods this node SNATs (replyRules).
	steerRepliesChain = "steer_replies"
	steerMarkPrefix   = "steer_mark_"
)

var steerSets = []*nftables.Set{
	{Table: table, Name: steerPods4Set, IsMap: true, DataType: nftables.TypeVerdict, KeyType: nftables.TypeIPAddr},
	{Table: table, Name: steerPods6Set, IsMap: true, DataType: nftables.TypeVerdict, KeyType: nftables.TypeIP6Addr},
	{Table: table, Name: steerRemote4Set, IsMap: true, DataType: nftables.TypeVerdict, KeyType: nftables.TypeIPAddr},
	{Table: table, Name: steerRemote6Set, IsMap: true, DataType: nftables.TypeVerdict, KeyType: nftables.TypeIP6Addr},
	{Table: table, Name: replyPods4Set, IsMap: true, DataType: nftables.TypeVerdict, KeyType: nftables.TypeIPAddr},
	{Table: table, Name: replyPods6Set, IsMap: true, DataType: nftables.TypeVerdict, KeyType: nftables.TypeIP6Addr},
}

func steerChain(mark uint32) string { return fmt.Sprintf("%s%08x", steerMarkPrefix, mark) }

// addSteered adds the steered pods' elements to the wanted contents: those with a mark under
// the mask, but the local pods whose flows are spread over this node too (Spread): their
// unmarked flows are this node's share, to leave with its egress IP.
func addSteered(c contents, s *dataplane.NftablesState) {
	for _, p := range s.Steered {
		if !p.Remote && slices.Contains(s.Spread, p.Pod) {
			continue
		}
		v4, v6 := steerPods4Set, steerPods6Set
		if p.Remote {
			v4, v6 = steerRemote4Set, steerRemote6Set
		}
		addJump(c, s.SteerMask, p.Mark, p.Pod, v4, v6)
	}
}

// steerChains are the steer_mark_<mark> chains the contents' maps jump to, sorted.
func steerChains(c contents) []string {
	return c.targets(steerPods4Set, steerPods6Set, steerRemote4Set, steerRemote6Set, secondaryMarks6Set, replyPods4Set, replyPods6Set)
}

// addReplies adds the elements of the other nodes' pods whose replies are routed by a mark.
func addReplies(c contents, s *dataplane.NftablesState) {
	for _, p := range s.Replies {
		addJump(c, s.SteerMask, p.Mark, p.Pod, replyPods4Set, replyPods6Set)
	}
}

// addJump adds pod's element to the verdict map of its family, v4 or v6: a jump to the
// steer_mark chain of mark, when mark is a whole mark under the mask.
func addJump(c contents, mask, mark uint32, pod netip.Addr, v4, v6 string) {
	m, pod := mark&mask, pod.Unmap()
	if m == 0 || m != mark || !pod.IsValid() {
		return
	}
	chain, k := steerChain(m), pod.AsSlice()
	c.add(family(pod, v4, v6), string(k), chain)
}

// replyRules, in steer_replies (prerouting_route: after the SNAT is undone at dstnat and
// after the reverse path checks, which judge a reply by the mark it had, just before the
// routing decision):
//
//	ct direction reply ct status snat ip daddr vmap @egressip_reply_pods4 (ip6 likewise)
func replyRules(sets map[string]*nftables.Set) [][]expr.Any {
	var rules [][]expr.Any
	for _, v4 := range []bool{true, false} {
		set := sets[replyPods6Set]
		if v4 {
			set = sets[replyPods4Set]
		}
		rules = append(rules, slices.Concat(nfproto(v4), ctDirection(ctDirReply), ctStatus(ctStatusSrcNAT, false), []expr.Any{
			addrField(v4, false, 1),
			&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID, IsDestRegSet: true},
		}))
	}
	return rules
}

// steerRules:
//
//	ct direction original meta mark & mask == 0
//	ip daddr != @egressip_exempt4 ip saddr vmap @steer_pods4 (ip6 likewise)
//	ct direction original meta mark & mask != 0
//	ip daddr @egressip_exempt4 meta mark set meta mark & ~mask (ip6 likewise)
//	ct direction original meta mark & mask == 0
//	ip daddr != @egressip_exempt4 ip saddr vmap @steer_remote4 (ip6 likewise)
//
// The classifier marks every packet of a steered pod to an address that is not exempt (but a
// spread pod's share of this node, which is not in the maps), so the first two see only
// packets whose destination changed after it: DNAT by kube-proxy, or
// by Cilium's tc program after egressd's (conntrack never sees that one, so conntrack's DNAT
// status is not asked). The first steers a Service's backend outside the cluster; the second
// undoes the converse: the classifier marked a packet to an address that is not exempt (a
// Service's external IP) and DNAT sent it to a pod or node, which the steering table's
// default route would have taken to the egress node or gateway.
func steerRules(mask uint32, sets map[string]*nftables.Set) [][]expr.Any {
	if mask == 0 {
		return nil
	}
	var rules [][]expr.Any
	unmarked := func(v4 bool, exempt, pods *nftables.Set) []expr.Any {
		return slices.Concat(markBits(mask, 1), []expr.Any{
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: make([]byte, 4)},
			addrField(v4, false, 1), lookup(exempt, 1, true),
			addrField(v4, true, 1),
			&expr.Lookup{SourceRegister: 1, SetName: pods.Name, SetID: pods.ID, IsDestRegSet: true},
		})
	}
	for _, v4 := range []bool{true, false} {
		exempt, local, remote := sets[exempt6Set], sets[steerPods6Set], sets[steerRemote6Set]
		if v4 {
			exempt, local, remote = sets[exempt4Set], sets[steerPods4Set], sets[steerRemote4Set]
		}
		rules = append(rules, slices.Concat(nfproto(v4), ctDirection(ctDirOriginal), unmarked(v4, exempt, local)))
		rules = append(rules, slices.Concat(nfproto(v4), ctDirection(ctDirOriginal),
			marked(mask), []expr.Any{addrField(v4, false, 1), lookup(exempt, 1, false)}, setMark(0, mask, false)))
		rules = append(rules, slices.Concat(nfproto(v4), ctDirection(ctDirOriginal), unmarked(v4, exempt, remote)))
	}
	return rules
}

// steerMarkRules are the rules of steer_mark_<mark>: meta mark set meta mark & ~mask ^ mark.
func steerMarkRules(chain string, mask uint32) [][]expr.Any {
	var m uint32
	fmt.Sscanf(strings.TrimPrefix(chain, steerMarkPrefix), "%08x", &m)
	return [][]expr.Any{setMark(m, mask, false)}
}
