package nft

import (
	"testing"

	"github.com/egressd/egressd/dataplane/rpfilter"
)

// TestReversePathMarkWindow: dataplane/rpfilter judges which IPv6 reverse path checks egressd
// meets by the priorities between which replies carry their egress IP's mark; they are the
// priorities of the chains that set it and remove it here.
func TestReversePathMarkWindow(t *testing.T) {
	prio := map[string]int{}
	for _, b := range baseChains {
		for _, target := range b.targets {
			prio[target] = int(b.prio)
		}
	}
	if got := prio[egressIPPrerouting]; got != rpfilter.MarkFrom {
		t.Errorf("%s runs at %d, rpfilter.MarkFrom is %d", egressIPPrerouting, got, rpfilter.MarkFrom)
	}
	if got := prio[egressIPReversePath]; got != rpfilter.MarkUntil {
		t.Errorf("%s runs at %d, rpfilter.MarkUntil is %d", egressIPReversePath, got, rpfilter.MarkUntil)
	}
}
