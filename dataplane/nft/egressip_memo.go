package nft

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/egressd/egressd/dataplane"
)

// egressIPMemo is the EgressIP part of the last plan, kept while what it is planned from
// stays. On an egress node serving 10,000 pods of other nodes it is most of the planning of an
// Apply (about 20 ms), and most Applies change something else: a firewall, a pod's DSCP.
type egressIPMemo struct {
	in     egressIPInputs
	sets   contents // read only: the plans that take them and the written table share them
	failed map[dataplane.Origin]error
	valid  bool
}

// egressIPInputs are the fields of a state that addEgressIP reads, all it is given: a field it
// comes to read must be added here, where the memo compares it.
type egressIPInputs struct {
	mask                       uint32
	snat                       []dataplane.SNAT
	exempt, remotePods         []netip.Prefix
	guarded, spread, secondary []netip.Addr
	secondaryMarks             []dataplane.SecondaryMark
	nexthops                   []dataplane.SteerNexthop
	devices                    []string
}

func egressIPInputsOf(s *dataplane.NftablesState) egressIPInputs {
	return egressIPInputs{mask: s.SteerMask, snat: s.SNAT, exempt: s.Exempt, remotePods: s.RemotePods,
		guarded: s.Guarded, spread: s.Spread, secondary: s.Secondary, secondaryMarks: s.SecondaryMarks,
		nexthops: s.SteerNexthops, devices: s.SteerDevices}
}

func (a egressIPInputs) equal(b egressIPInputs) bool {
	return a.mask == b.mask && slices.Equal(a.snat, b.snat) && slices.Equal(a.exempt, b.exempt) &&
		slices.Equal(a.remotePods, b.remotePods) && slices.Equal(a.guarded, b.guarded) &&
		slices.Equal(a.spread, b.spread) && slices.Equal(a.secondary, b.secondary) &&
		slices.Equal(a.secondaryMarks, b.secondaryMarks) && slices.Equal(a.nexthops, b.nexthops) &&
		slices.Equal(a.devices, b.devices)
}

// add puts s's EgressIP elements in c, planned again only when their inputs changed. Returns
// the SNATs that cannot be programmed (a map of the caller's own).
func (m *egressIPMemo) add(c contents, s *dataplane.NftablesState) map[dataplane.Origin]error {
	in := egressIPInputsOf(s)
	if !m.valid || !m.in.equal(in) {
		sets := contents{}
		// The state's lists are read only once handed over (dataplane.Applier): kept, not copied.
		*m = egressIPMemo{in: in, sets: sets, failed: addEgressIP(sets, in), valid: true}
	}
	maps.Copy(c, m.sets)
	return maps.Clone(m.failed)
}

// repliesMemo is the reply maps of the last plan (egressip_reply_pods4/6), kept while the
// replies and the mask stay: an egress node has an element per pod of other nodes it SNATs
// (10,000 at the scale harness's size), and most Applies change something else.
type repliesMemo struct {
	mask    uint32
	replies []dataplane.SteeredPod
	sets    contents // read only, as egressIPMemo's
	valid   bool
}

// add puts s's reply elements in c, planned again only when their inputs changed.
func (m *repliesMemo) add(c contents, s *dataplane.NftablesState) {
	if !m.valid || m.mask != s.SteerMask || !slices.Equal(m.replies, s.Replies) {
		sets := contents{}
		addReplies(sets, s)
		*m = repliesMemo{mask: s.SteerMask, replies: s.Replies, sets: sets, valid: true}
	}
	maps.Copy(c, m.sets)
}
