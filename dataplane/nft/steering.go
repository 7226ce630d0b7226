package nft

import (
	"fmt"
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
// EgressService host); here, a steered pod's packet to a destination outside the exempt ones
// that is still unmarked gets the pod's mark after DNAT and before the routing decision. Its
// guard would otherwise drop it (nothing steered nor SNATed it). The same rule marks the
// packets of other nodes' pods that this node SNATs to an egress IP on a secondary network
// (they arrive from the wire, where no classifier runs): their mark selects the table of that
// IP's interface.
//
// As for the return paths (returnpaths.go), the mark cannot be OR-ed from a map: the maps are
// verdict maps to one chain per mark, steer_mark_<mark>, which sets that constant under the
// steering mask and keeps the other bits.

const (
	steerPods4Set   = "steer_pods4" // pod : jump steer_mark_<mark>
	steerPods6Set   = "steer_pods6"
	steerPodsChain  = "steer_unmarked"
	steerMarkPrefix = "steer_mark_"
)

var steerSets = []*nftables.Set{
	{Table: table, Name: steerPods4Set, IsMap: true, DataType: nftables.TypeVerdict, KeyType: nftables.TypeIPAddr},
	{Table: table, Name: steerPods6Set, IsMap: true, DataType: nftables.TypeVerdict, KeyType: nftables.TypeIP6Addr},
}

func steerChain(mark uint32) string { return fmt.Sprintf("%s%08x", steerMarkPrefix, mark) }

// addSteered adds the steered pods' elements to the wanted contents: those with a mark under
// the mask.
func addSteered(c contents, s *dataplane.NftablesState) {
	for _, p := range s.Steered {
		m, pod := p.Mark&s.SteerMask, p.Pod.Unmap()
		if m == 0 || m != p.Mark || !pod.IsValid() {
			continue
		}
		chain := steerChain(m)
		k := pod.AsSlice()
		c.add(family(pod, steerPods4Set, steerPods6Set), string(k), chain,
			nftables.SetElement{Key: k, VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: chain}})
	}
}

// steerChains are the steer_mark_<mark> chains the contents' maps jump to, sorted.
func steerChains(c contents) []string { return c.targets(steerPods4Set, steerPods6Set) }

// steerRules:
//
//	ct direction original meta mark & mask == 0
//	ip daddr != @egressip_exempt4 ip saddr vmap @steer_pods4 (ip6 likewise)
//	ct direction original ct status dnat meta mark & mask != 0
//	ip daddr @egressip_exempt4 meta mark set meta mark & ~mask (ip6 likewise)
//
// The second undoes the converse: the classifier marked a packet to an address that is not
// exempt (a Service's external IP) and DNAT sent it to a pod or node, which the steering
// table's default route would have taken to the egress node or gateway.
func steerRules(mask uint32, sets map[string]*nftables.Set) [][]expr.Any {
	if mask == 0 {
		return nil
	}
	var rules [][]expr.Any
	for _, v4 := range []bool{true, false} {
		exempt, steered := sets[exempt6Set], sets[steerPods6Set]
		if v4 {
			exempt, steered = sets[exempt4Set], sets[steerPods4Set]
		}
		rules = append(rules, slices.Concat(nfproto(v4), ctDirection(ctDirOriginal), markBits(mask, 1), []expr.Any{
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: make([]byte, 4)},
			addrField(v4, false, 1), lookup(exempt, 1, true),
			addrField(v4, true, 1),
			&expr.Lookup{SourceRegister: 1, SetName: steered.Name, SetID: steered.ID, IsDestRegSet: true},
		}))
		rules = append(rules, slices.Concat(nfproto(v4), ctDirection(ctDirOriginal), ctStatus(ctStatusDstNAT, false),
			marked(mask), []expr.Any{addrField(v4, false, 1), lookup(exempt, 1, false)}, setMark(0, mask, false)))
	}
	return rules
}

// steerMarkRules are the rules of steer_mark_<mark>: meta mark set meta mark & ~mask ^ mark.
func steerMarkRules(chain string, mask uint32) [][]expr.Any {
	var m uint32
	fmt.Sscanf(strings.TrimPrefix(chain, steerMarkPrefix), "%08x", &m)
	return [][]expr.Any{setMark(m, mask, false)}
}
