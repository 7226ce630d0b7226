package nft

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/egressd/egressd/dataplane"
)

// Steering after DNAT. The classifier steers a pod's packets before DNAT, so it sees a Service
// address, exempt as a cluster network, where the backend may be outside the cluster (an
// external database behind a selectorless Service; the API server of a managed control plane
// behind the kubernetes Service). Upstream's reroute policies match after OVN's load balancer
// and send such a connection to the egress node (or gateway, or EgressService host); here, a
// local steered pod's DNATed packet to a destination outside the exempt ones that the
// classifier left unmarked gets the pod's mark after DNAT and before the routing decision. Its
// guard would otherwise drop it (nothing steered nor SNATed it).
//
// As for the return paths (returnpaths.go), the mark cannot be OR-ed from a map: the maps are
// verdict maps to one chain per mark, steer_mark_<mark>, which sets that constant under the
// steering mask and keeps the other bits.

const (
	steerBackends4Set  = "steer_backends4" // pod : jump steer_mark_<mark>
	steerBackends6Set  = "steer_backends6"
	steerBackendsChain = "steer_service_backends"
	steerMarkPrefix    = "steer_mark_"
)

var steerSets = []*nftables.Set{
	{Table: table, Name: steerBackends4Set, IsMap: true, DataType: nftables.TypeVerdict, KeyType: nftables.TypeIPAddr},
	{Table: table, Name: steerBackends6Set, IsMap: true, DataType: nftables.TypeVerdict, KeyType: nftables.TypeIP6Addr},
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
		c.add(family(pod, steerBackends4Set, steerBackends6Set), string(k), chain,
			nftables.SetElement{Key: k, VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: chain}})
	}
}

// steerChains are the steer_mark_<mark> chains the contents' maps jump to, sorted.
func steerChains(c contents) []string { return c.targets(steerBackends4Set, steerBackends6Set) }

// steerRules:
//
//	ct direction original ct status dnat meta mark & mask == 0
//	ip daddr != @egressip_exempt4 ip saddr vmap @steer_backends4 (ip6 likewise)
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
		exempt, steered := sets[exempt6Set], sets[steerBackends6Set]
		if v4 {
			exempt, steered = sets[exempt4Set], sets[steerBackends4Set]
		}
		rules = append(rules, slices.Concat(nfproto(v4), ctDirection(ctDirOriginal), ctStatus(ctStatusDstNAT, false),
			markBits(mask, 1), []expr.Any{
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
