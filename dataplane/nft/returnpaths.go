package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// External gateways' return paths (upstream's ecmp_symmetric_reply). A gateway that forwards an
// outside client's connection to a local pod expects the replies back: the node's own routes
// would send them elsewhere (straight to the client, or through another gateway of the ECMP
// group). So the first packet of a connection to a served pod from a gateway's MAC puts the
// gateway's mark into the connection's conntrack mark, and the reply packets get it back into
// skb->mark, which policy routing (dataplane/routing) sends through that gateway.
//
// The kernel does not record the next hop of a connection; the conntrack mark does, and so also
// names the connections to delete when a gateway's return path goes (removed from its policy,
// or its BFD session no longer Up): upstream deletes the entries of the served pods whose
// ct_label holds a MAC not among the remaining gateways'; here, those whose mark bits are no
// longer a live gateway's. Their next packet is tracked afresh: from another gateway it takes
// that gateway's mark; from the pod it is a new outbound flow, spread over the live gateways.
// Outbound flows are not pinned to a gateway (the kernel routes each packet through the
// current nexthop group), so they move to the survivors without any deletion.
//
// As with DSCP (qos.go), nft cannot OR a value taken from a map into a mark on the kernels
// egressd supports, so the maps are verdict maps to one chain per mark, extroute_return_<mark>,
// which sets that constant under the steering mask and keeps the other bits.

const (
	extrouteGateways4Set = "extroute_gateways4" // pod . gateway MAC : jump extroute_return_<mark>
	extrouteGateways6Set = "extroute_gateways6"
	extrouteMarksSet     = "extroute_marks" // ct mark & mask : jump extroute_return_<mark>
	extroutePrerouting   = "extroute_prerouting"
	extrouteReturnPrefix = "extroute_return_"
)

var extrouteSets = []*nftables.Set{
	{Table: table, Name: extrouteGateways4Set, IsMap: true, Concatenation: true, DataType: nftables.TypeVerdict,
		KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeEtherAddr)},
	{Table: table, Name: extrouteGateways6Set, IsMap: true, Concatenation: true, DataType: nftables.TypeVerdict,
		KeyType: nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeEtherAddr)},
	{Table: table, Name: extrouteMarksSet, IsMap: true, DataType: nftables.TypeVerdict, KeyType: nftables.TypeMark},
}

func returnChain(mark uint32) string { return fmt.Sprintf("%s%08x", extrouteReturnPrefix, mark) }

// addReturnPaths adds the return paths' elements to the wanted contents: those with a MAC and
// a mark under the mask.
func addReturnPaths(c contents, s *dataplane.NftablesState) {
	for _, r := range s.ReturnPaths {
		m := r.Mark & s.SteerMask
		if m == 0 || m != r.Mark || len(r.MAC) != 6 {
			continue
		}
		chain := returnChain(m)
		k := binary.NativeEndian.AppendUint32(nil, m)
		c.add(extrouteMarksSet, string(k), chain)
		for _, pod := range r.Pods {
			pod = pod.Unmap()
			if !pod.IsValid() || pod.Is4() != r.Gateway.Unmap().Is4() {
				continue
			}
			// The MAC takes two 4-byte registers of the concatenation: padded to 8 bytes.
			k := slices.Concat(pod.AsSlice(), r.MAC, []byte{0, 0})
			c.add(family(pod, extrouteGateways4Set, extrouteGateways6Set), string(k), chain)
		}
	}
}

// dynamicChains are the chains the contents' verdict maps jump to.
func dynamicChains(c contents) []string {
	return slices.Concat(dscpChains(c), returnChains(c), steerChains(c))
}

// gatewayFlushes returns how many return paths went (gateways removed, BFD sessions no longer
// Up) and how many conntrack entries of their connections were deleted, since New.
func (t *Table) gatewayFlushes() (gone, entries uint64) {
	return t.gatewaysGone.Load(), t.flushedFlows.Load()
}

// returnChains are the extroute_return_<mark> chains the contents' maps jump to, sorted.
func returnChains(c contents) []string { return c.targets(extrouteMarksSet) }

// liveReturns are the gateways of the return paths s asks for that addReturnPaths programs,
// by mark.
func liveReturns(s *dataplane.NftablesState) map[uint32]netip.Addr {
	out := map[uint32]netip.Addr{}
	for _, r := range s.ReturnPaths {
		if m := r.Mark & s.SteerMask; m != 0 && m == r.Mark && len(r.MAC) == 6 {
			out[m] = r.Gateway.Unmap()
		}
	}
	return out
}

// extrouteRules:
//
//	ct state new meta iiftype ether ip daddr . ether saddr vmap @extroute_gateways4 (ip6 likewise)
//	ct direction reply ct mark & mask vmap @extroute_marks
func extrouteRules(mask uint32, sets map[string]*nftables.Set) [][]expr.Any {
	if mask == 0 {
		return nil
	}
	newState := ctState(ctStateNew)
	var rules [][]expr.Any
	for _, v4 := range []bool{true, false} {
		set, macReg := sets[extrouteGateways6Set], uint32(13)
		if v4 {
			set, macReg = sets[extrouteGateways4Set], 10
		}
		rules = append(rules, slices.Concat(nfproto(v4), newState, []expr.Any{
			// meta iiftype ether: only there is the link-layer source a MAC.
			&expr.Meta{Key: expr.MetaKeyIIFTYPE, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint16(unix.ARPHRD_ETHER)},
			addrField(v4, false, 9),
			&expr.Payload{DestRegister: macReg, Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6},
			&expr.Lookup{SourceRegister: 9, SetName: set.Name, SetID: set.ID, IsDestRegSet: true},
		}))
	}
	marks := sets[extrouteMarksSet]
	rules = append(rules, slices.Concat(ctDirection(ctDirReply), []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: make([]byte, 4)},
		&expr.Lookup{SourceRegister: 1, SetName: marks.Name, SetID: marks.ID, IsDestRegSet: true},
	}))
	return rules
}

// returnRules are the rules of extroute_return_<mark>: the connection's first packet sets the
// mark in its conntrack mark, a reply packet in its skb->mark; other bits are kept.
func returnRules(chain string, mask uint32) [][]expr.Any {
	var m uint32
	fmt.Sscanf(strings.TrimPrefix(chain, extrouteReturnPrefix), "%08x", &m)
	return [][]expr.Any{
		slices.Concat(ctDirection(ctDirOriginal), setMark(m, mask, true)),
		slices.Concat(ctDirection(ctDirReply), setMark(m, mask, false)),
	}
}

// gatewayFlows matches the conntrack entries whose mark bits under mask are not a live return
// path's.
type gatewayFlows struct {
	mask uint32
	live map[uint32]bool
}

func (f gatewayFlows) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	m := flow.Mark & f.mask
	return m != 0 && !f.live[m]
}

// flushGateways deletes the conntrack entries of the connections whose return path went since
// the last successful flush (t.returns; nil: unknown), or whose mark now names another gateway,
// and counts them.
func (t *Table) flushGateways(s *dataplane.NftablesState) error {
	live := liveReturns(s)
	keep := map[uint32]bool{}
	for m, gw := range live {
		keep[m] = true
		if old, ok := t.returns[m]; ok && old != gw {
			keep[m] = false // the mark's slot went to another gateway in one sync
		}
	}
	gone := 0
	for m := range t.returns {
		if !keep[m] {
			gone++
		}
	}
	if s.SteerMask == 0 || t.returns != nil && gone == 0 {
		t.returns = live
		return nil
	}
	if t.ct == nil {
		return errors.New("no conntrack netlink socket")
	}
	// At the first Apply (t.returns nil) what a predecessor programmed is unknown: every
	// entry whose mark is not live now goes.
	f := gatewayFlows{mask: s.SteerMask, live: keep}
	var errs []error
	var deleted uint
	for _, family := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		n, err := t.ct.ConntrackDeleteFilters(netlink.ConntrackTable, family, f)
		deleted += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	t.flushedFlows.Add(uint64(deleted))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delete the conntrack entries of connections through gone gateways: %w", err)
	}
	t.gatewaysGone.Add(uint64(gone))
	t.returns = live
	return nil
}
