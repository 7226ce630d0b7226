package kernel

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sync"
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

// cniLook is how often the node's CNI is looked at again outside the pods' interfaces
// (cniWatch.look): Cilium adds a load-balancer IP's wildcard entry some time after egressd
// SNATs to the IP, and rewrites its node configuration when restarted with other settings,
// while no sync may follow. The lookup walks the programs of the node's devices, too much for
// every Apply.
const cniLook = 5 * time.Second

// cniWatch is what the last looks at the node's CNI found, outside the pods' interfaces:
// wildcard entries of Cilium's load balancer for the addresses egressd SNATs to, and the
// settings Cilium compiled into its programs. Apply reports it (and looks at once at
// addresses new to it); the periodic look refreshes it and asks for a sync when it changed.
type cniWatch struct {
	nodeConfig string // Cilium's node configuration header; "" looks for none
	log        *slog.Logger

	mu sync.Mutex
	// snat is the last Apply's SNAT list, addrs what it SNATs to, sorted: a list handed again
	// (the state's lists are read only) is not sorted again (10,000 SNATs on an egress node).
	snat         []dataplane.SNAT
	addrs        []netip.Addr
	looked       string // the addresses last looked up; "" before the first look
	wildcards    int
	wildcardsErr string // the last error logged
	// compiledAt is the header's size and modification time when last read without error.
	compiledAt  string
	compiled    []tc.Conflict
	compiledErr string // the last error logged
}

// conflicts are the wildcard entries for what s SNATs to and the compiled settings, as found
// by the last look, or now for addresses not looked up yet.
func (w *cniWatch) conflicts(s *dataplane.State) (int, []tc.Conflict) {
	w.mu.Lock()
	defer w.mu.Unlock()
	snat := s.Nftables.SNAT
	if w.looked != "" && len(snat) == len(w.snat) && (len(snat) == 0 || &snat[0] == &w.snat[0]) {
		return w.wildcards, w.compiled
	}
	w.snat = snat
	var addrs []netip.Addr
	for _, n := range snat {
		addrs = append(addrs, n.To)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	w.addrs = slices.Compact(addrs)
	if w.looked == "" || fmt.Sprint(w.addrs) != w.looked {
		w.lookLocked()
	}
	return w.wildcards, w.compiled
}

// look looks again, and reports whether what it found changed.
func (w *cniWatch) look() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	wildcards, compiled := w.wildcards, w.compiled
	w.lookLocked()
	return wildcards != w.wildcards || !slices.Equal(compiled, w.compiled)
}

// lookLocked looks up the wildcard entries (tc.ServiceWildcards) of w.addrs and reads the node
// configuration again if it changed (tc.CompiledConflicts). w.mu held.
func (w *cniWatch) lookLocked() {
	found, err := tc.ServiceWildcards(w.addrs)
	w.looked, w.wildcards = fmt.Sprint(w.addrs), len(found)
	if msg := fmt.Sprint(err); msg != w.wildcardsErr {
		w.wildcardsErr = msg
		if err != nil {
			w.log.Warn("could not tell whether Cilium's load balancer drops the replies to egressd's source NAT", "err", err)
		}
	}
	if w.nodeConfig == "" {
		return
	}
	stamp := "absent"
	if fi, err := os.Stat(w.nodeConfig); err == nil {
		stamp = fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
	}
	if stamp == w.compiledAt {
		return
	}
	compiled, err := tc.CompiledConflicts(w.nodeConfig)
	w.compiled, w.compiledAt = compiled, stamp
	if err != nil {
		w.compiledAt = "" // read again at the next look
	}
	if msg := fmt.Sprint(err); msg != w.compiledErr {
		w.compiledErr = msg
		if err != nil {
			w.log.Warn("could not tell whether Cilium's programs masquerade what egressd steers", "file", w.nodeConfig, "err", err)
		}
	}
}
