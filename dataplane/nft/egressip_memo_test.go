package nft

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/egressd/egressd/dataplane"
)

// TestEgressIPPartPlannedAgainWhenItsInputsChange: a Table keeps the EgressIP part of its plan
// only while the fields it is planned from stay (new lists: a state's are read only once
// handed over), and a caller's changes to the returned failures do not stick.
func TestEgressIPPartPlannedAgainWhenItsInputsChange(t *testing.T) {
	s := &dataplane.NftablesState{SteerMask: 0x00ff0000,
		SNAT:    []dataplane.SNAT{{Origin: eipA, Pod: addr("10.244.1.5"), To: addr("172.18.0.100")}},
		Guarded: []netip.Addr{addr("10.244.1.5")}}
	tbl := &Table{}
	has := func(set, key string) bool {
		want, _, _, _ := tbl.plan(s)
		_, ok := want[set][string(addr(key).AsSlice())]
		return ok
	}
	if !has(snat4Set, "10.244.1.5") || !has(guarded4Set, "10.244.1.5") {
		t.Fatalf("the first plan lacks the SNAT or guard of 10.244.1.5")
	}
	s.SNAT, s.Guarded = slices.Clone(s.SNAT), slices.Clone(s.Guarded)
	s.SNAT[0].Pod, s.Guarded[0] = addr("10.244.1.6"), addr("10.244.1.6")
	if !has(snat4Set, "10.244.1.6") || has(snat4Set, "10.244.1.5") || !has(guarded4Set, "10.244.1.6") {
		t.Errorf("a pod changed: the plan still SNATs or guards the old one")
	}
	s.Exempt = append(s.Exempt, prefix("172.20.0.0/16"))
	if !has(exempt4Set, "172.20.0.0") {
		t.Errorf("an exempt prefix added: the plan lacks it")
	}
	s.SNAT = append(s.SNAT, dataplane.SNAT{Origin: eipB, Pod: addr("10.244.1.6"), To: addr("172.18.0.101")})
	_, _, _, failed := tbl.plan(s)
	if failed[eipB] == nil {
		t.Fatalf("a pod SNATed to two egress IPs: no failure for %v", eipB)
	}
	failed[eipA] = errors.New("the caller's")
	if _, _, _, again := tbl.plan(s); again[eipA] != nil || again[eipB] == nil {
		t.Errorf("the kept failures are %v, want only %v's", again, eipB)
	}
}

// TestRepliesPlannedAgainWhenTheyChange: a Table keeps the reply maps of its plan only while
// the replies and the mask stay.
func TestRepliesPlannedAgainWhenTheyChange(t *testing.T) {
	s := &dataplane.NftablesState{SteerMask: 0x00ff0000,
		Replies: []dataplane.SteeredPod{{Pod: addr("10.244.1.5"), Mark: 0x00010000}}}
	tbl := &Table{}
	jumpOf := func(key string) string {
		want, _, _, _ := tbl.plan(s)
		return want[replyPods4Set][string(addr(key).AsSlice())].data
	}
	if got := jumpOf("10.244.1.5"); got != steerChain(0x00010000) {
		t.Fatalf("the first plan's reply of 10.244.1.5 jumps to %q, want %q", got, steerChain(0x00010000))
	}
	s.Replies = []dataplane.SteeredPod{{Pod: addr("10.244.1.6"), Mark: 0x00010000}}
	if jumpOf("10.244.1.5") != "" || jumpOf("10.244.1.6") == "" {
		t.Errorf("a reply's pod changed: the plan still routes the old one's replies")
	}
	s.Replies = []dataplane.SteeredPod{{Pod: addr("10.244.1.6"), Mark: 0x00020000}}
	if got := jumpOf("10.244.1.6"); got != steerChain(0x00020000) {
		t.Errorf("a reply's mark changed: it jumps to %q, want %q", got, steerChain(0x00020000))
	}
	s.SteerMask = 0x00f00000 // the mark is no longer a whole mark under the mask
	if got := jumpOf("10.244.1.6"); got != "" {
		t.Errorf("the mask changed: the plan still routes the reply to %q", got)
	}
}
