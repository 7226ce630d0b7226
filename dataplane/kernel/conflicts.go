package kernel

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/tc"
)

// The settings of a CNI's programs that undo what egressd programs (tc.Conflict): looked up
// where they act, reported in Result.Conflicts and egressd_cni_conflicts.

// cniLook is how often the node's CNI is looked at again (cniWatch.look): Cilium adds a
// load-balancer IP's wildcard entry some time after egressd SNATs to the IP, rewrites its node
// configuration (and loads its programs on the pods' interfaces again) when restarted with
// other settings, and loads a pod's program some time after egressd attached there, while no
// sync may follow. The lookup walks the programs of the node's devices, too much for every
// Apply.
const cniLook = 5 * time.Second

// podLooks are the ages of egressd's attachment to a pod's interface from which the periodic
// look (cniLook) looks at the programs there again, once each: Cilium's loader appends its
// program after the pod's CNI ADD (docs/compat.md), within seconds, later when its agent is
// busy. After the last, only a new node configuration has them looked at again: a node of 110
// pods would otherwise query 110 interfaces every look. Looking at every look for the minute
// cost a node that started 200 pods 600 interfaces' queries, three requests each, every 5 s.
var podLooks = []time.Duration{0, 15 * time.Second, 30 * time.Second, time.Minute}

// settle is where a newly attached interface is in podLooks.
type settle struct {
	at   time.Time // egressd attached there
	next int       // the podLooks entry of the next look
}

// due says whether the look at now looks at the interface, and moves past the entries of
// podLooks its age reached (a look delayed past several looks once).
func (s *settle) due(now time.Time) bool {
	age := now.Sub(s.at)
	if s.done() || age < podLooks[s.next] {
		return false
	}
	for s.next < len(podLooks) && podLooks[s.next] <= age {
		s.next++
	}
	return true
}

// done: no look of podLooks is left.
func (s *settle) done() bool { return s.next == len(podLooks) }

// cniWatch is what the last looks at the node's CNI found: the settings of the programs after
// the classifier on the pods' interfaces, wildcard entries of Cilium's load balancer for the
// addresses egressd SNATs to, and the settings Cilium compiled into its programs. Apply
// reports it (and looks at once at interfaces and addresses new to it); the periodic look
// refreshes it and asks for a sync when it changed.
type cniWatch struct {
	nodeConfig string // Cilium's node configuration header; "" looks for none
	log        *slog.Logger

	mu sync.Mutex
	// pods are the conflicts found on each interface the classifier is attached to, settling
	// where those attached recently are in podLooks, podErrs the last error logged for each,
	// progs the settings of the programs found there.
	pods     map[string][]tc.Conflict
	settling map[string]*settle
	podErrs  map[string]string
	progs    *tc.PodConflicts
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

// newCNIWatch looks at nothing yet.
func newCNIWatch(nodeConfig string, nl *netlink.Handle, log *slog.Logger) *cniWatch {
	return &cniWatch{nodeConfig: nodeConfig, log: log, pods: map[string][]tc.Conflict{}, settling: map[string]*settle{},
		podErrs: map[string]string{}, progs: tc.NewPodConflicts(nl)}
}

// attached looks at the programs after the classifier on ifname, just attached there: a pod
// steered there would not be.
func (w *cniWatch) attached(ifname string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.settling[ifname] = &settle{at: time.Now()}
	w.lookPodLocked(ifname)
}

// podInterfaces keeps looking at the interfaces of kept and no others: one it has not looked
// at yet (the classifier adopted from an earlier agent) it looks at now.
func podInterfaces[V any](w *cniWatch, kept map[string]V) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name := range w.pods {
		if _, ok := kept[name]; !ok {
			delete(w.pods, name)
			delete(w.settling, name)
			delete(w.podErrs, name)
		}
	}
	for name := range kept {
		if _, ok := w.pods[name]; !ok {
			w.lookPodLocked(name)
		}
	}
}

// podCounts are the conflicts found on the pods' interfaces, each with the number of
// interfaces where it is.
func (w *cniWatch) podCounts() map[tc.Conflict]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[tc.Conflict]int{}
	for _, cs := range w.pods {
		for _, c := range cs {
			out[c]++
		}
	}
	return out
}

// lookPodLocked looks at the programs after the classifier on ifname. w.mu held.
func (w *cniWatch) lookPodLocked(ifname string) {
	cs, err := w.progs.At(ifname)
	if _, gone := errors.AsType[netlink.LinkNotFoundError](err); gone {
		err = nil // its pod went: the next sync forgets it
	}
	w.pods[ifname] = cs
	if msg := fmt.Sprint(err); msg != w.podErrs[ifname] {
		w.podErrs[ifname] = msg
		if err != nil {
			w.log.Warn("could not tell whether the programs after egressd's classifier keep its steering", "interface", ifname, "err", err)
		}
	}
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
	wildcards, compiled, compiledAt, pods := w.wildcards, w.compiled, w.compiledAt, maps.Clone(w.pods)
	w.lookLocked()
	reloaded := w.compiledAt != compiledAt // Cilium configured again: its programs loaded again
	now := time.Now()
	for name := range w.pods {
		s, ok := w.settling[name]
		if due := ok && s.due(now); due || reloaded {
			w.lookPodLocked(name)
		}
		if ok && s.done() {
			delete(w.settling, name)
		}
	}
	w.progs.Forget()
	return wildcards != w.wildcards || !slices.Equal(compiled, w.compiled) ||
		!maps.EqualFunc(pods, w.pods, slices.Equal)
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
