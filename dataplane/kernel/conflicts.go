package kernel

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/tc"
)

// The settings of a CNI's programs that undo what egressd programs (tc.Conflict): looked up
// where they act, reported in Result.Conflicts and egressd_cni_conflicts.

// findConflicts notes the settings of the programs after the classifier at ingress of ifname
// that undo its steering: a pod steered there would not be.
func (a *attachFacility) findConflicts(ifname string) {
	cs, err := tc.Conflicts(ifname)
	if err != nil {
		a.log.Warn("could not tell whether the programs after egressd's classifier keep its steering", "interface", ifname, "err", err)
	}
	if len(cs) > 0 {
		a.conflicts[ifname] = cs
	} else {
		delete(a.conflicts, ifname)
	}
}

// conflictCounts are the conflicts found, each with the number of pod interfaces where it is.
func (a *attachFacility) conflictCounts() map[dataplane.Conflict]int {
	out := map[dataplane.Conflict]int{}
	for _, cs := range a.conflicts {
		for _, c := range cs {
			out[dataplane.Conflict{Program: c.Program, Setting: c.Setting, Effect: c.Effect(), Of: "pod interfaces"}]++
		}
	}
	return out
}

// wildcardsEvery is how often serviceWildcards looks again at the same addresses: the
// lookup walks the programs of the node's devices, too much for every Apply.
const wildcardsEvery = 30 * time.Second

// wildcardWatch is what serviceWildcards last found. Apply's goroutine only.
type wildcardWatch struct {
	addrs string // the addresses looked up, sorted
	at    time.Time
	found int
	err   string // the last error logged
}

// serviceWildcards is how many of the addresses s SNATs to (egress IPs, EgressServices'
// load-balancer IPs) Cilium's load balancer holds a wildcard entry for (tc.ServiceWildcard),
// looked up when they change and every wildcardsEvery.
func (d *Applier) serviceWildcards(s *dataplane.State) int {
	var addrs []netip.Addr
	for _, n := range s.Nftables.SNAT {
		addrs = append(addrs, n.To)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	key, w := fmt.Sprint(addrs), &d.wildcards
	if key == w.addrs && time.Since(w.at) < wildcardsEvery {
		return w.found
	}
	found, err := tc.ServiceWildcards(addrs)
	w.addrs, w.at, w.found = key, time.Now(), len(found)
	if msg := fmt.Sprint(err); msg != w.err {
		w.err = msg
		if err != nil {
			d.log.Warn("could not tell whether Cilium's load balancer drops the replies to egressd's source NAT", "err", err)
		}
	}
	return w.found
}
