// Package tc keeps egressd's programs attached to exactly the pod-facing interfaces it is
// given: the classifier at ingress (packets from the pods) and its companion at egress (packets
// towards the pods). Each attachment outlives the agent, so that enforcement continues while it
// restarts or upgrades: a new agent adopts what it finds and, at its first Attach (once its maps
// are written), swaps its program in place, never detach-then-attach.
//
// An interface gets one of two attachments per hook:
//   - a filter (clsact.go): a direct-action cls_bpf filter of the interface's clsact qdisc, at
//     egressd's priority and handle, found again by them. The kernel waits at most for an
//     expedited RCU grace period: both programs attach in under half a millisecond per
//     interface (BenchmarkPrivilegedAttach). This is the common case: the pod-facing
//     interfaces of routed and bridged CNIs carry no other program.
//   - a tcx link (tcx.go), first in the hook's chain, pinned under <pin root>/links: where
//     another program already runs at that hook (a CNI's own tcx program or tc filter), and on
//     every new interface of a node whose CNI runs programs of its own there (found at one of
//     its interfaces before, or Cilium's cilium_host is up): such a CNI adds its program after
//     the CNI ADD and may delete the hook's filters then (Cilium does). tcx runs
//     before any tc filter and a program there that ends the chain (TCX_PASS, a redirect) would
//     skip a filter of ours; first in the tcx chain, ours judges every packet. Attaching (or
//     detaching) a tcx link waits for a full RCU grace period under the RTNL lock (12 ms on
//     one 2-core machine, well under a millisecond on another), during which every other
//     pod's interface setup on the node waits: on the first, with pods started 16 at a time,
//     that made a CNI ADD wait 300 ms and more.
//
// An interface attached by a filter moves to a tcx link when an Attach finds another program at the
// hook (it was added after ours), and gets its filter again when it is gone (its clsact qdisc
// deleted by hand or by another agent). Attach looks again at most once a minute per interface
// (two syscalls each: a node's syncs stay cheap with hundreds of pods), so for up to a minute,
// and until the next sync, that program may run first, or none of ours.
package tc

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ProgramName is the classifier's name as bpftool and Query show it.
const ProgramName = "egressd_frompod"

// Hook is where on a pod-facing interface a program runs.
type Hook struct {
	tcx       ebpf.AttachType
	parent    uint32 // the clsact qdisc's class of the direction
	pinPrefix string
	program   string // its name, for errors and as the filter's name
}

// The hooks: Ingress runs the classifier on what the pods send, Egress its companion on what
// is sent to them, Port the guard of a bridge's ports (the host sides of its pods' veths) on
// what each pod sends into the bridge.
var (
	Ingress = Hook{ebpf.AttachTCXIngress, netlink.HANDLE_MIN_INGRESS, "tcx_ingress_", ProgramName}
	Egress  = Hook{ebpf.AttachTCXEgress, netlink.HANDLE_MIN_EGRESS, "tcx_egress_", "egressd_topod"}
	Port    = Hook{ebpf.AttachTCXIngress, netlink.HANDLE_MIN_INGRESS, "tcx_port_", "egressd_fromport"}
)

// Attacher owns the attachments of one program at one hook of the interfaces of a network
// namespace, with the tcx links pinned under one pin root.
type Attacher struct {
	nl    *netlink.Handle // in the namespace of the interfaces
	dir   string
	hook  Hook
	prog  *ebpf.Program
	links map[string]*attached // by interface name
	// cniPrograms: the node's CNI runs programs of its own at this hook of its pod interfaces
	// (found at one, or Cilium's devices are up): new interfaces get a tcx link at once. Such
	// a CNI adds its program after the CNI ADD, when egressd's filter is in place already,
	// and may delete the hook's filters as it does (Cilium's loader deletes every filter at
	// a hook it attaches to by tcx): until egressd attached again, the pod's packets would
	// meet only the CNI's programs.
	cniPrograms bool
}

// attached is one interface's attachment: a tcx link, or (link nil) egressd's filter.
type attached struct {
	link    tcxLink
	ifindex int
	// adopted: a predecessor's program still runs on it, until Attach swaps ours in.
	adopted bool
	// checked is when a filter's hook was last looked at for other programs.
	checked time.Time
}

// recheck is how often Attach looks for another program at the hook of a filter of ours.
var recheck = time.Minute

// New adopts what a previous agent attached: its pinned tcx links (those whose interface is
// gone are unpinned) and its filters. They keep running the predecessor's program, with the
// maps it was loaded with, until Attach. (After an upgrade that changed a map's layout, prog's
// maps are new and empty until the first Apply: swapping it in earlier would stop enforcement
// for that long.)
func New(pinRoot string, hook Hook, prog *ebpf.Program) (*Attacher, error) {
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle: %w", err)
	}
	a := &Attacher{nl: nl, dir: LinksDir(pinRoot), hook: hook, links: map[string]*attached{}, prog: prog}
	if err := a.adoptLinks(); err != nil {
		nl.Close()
		return nil, err
	}
	if err := a.adoptFilters(); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// Detach detaches the program from every interface it owns that is not in want (name ->
// ifindex), or has another index now. It returns an error per interface that failed.
func (a *Attacher) Detach(want map[string]int) map[string]error {
	errs := map[string]error{}
	for name, at := range a.links {
		if idx, ok := want[name]; ok && idx == at.ifindex {
			continue
		}
		if err := a.detach(at); err != nil {
			errs[name] = fmt.Errorf("detach %s from %s: %w", a.hook.program, name, err)
		}
		delete(a.links, name)
	}
	return errs
}

// Outcome is what Attach did to an interface's hook.
type Outcome int

const (
	// Kept: the program was attached already (its predecessor's swapped for it, if adopted).
	Kept Outcome = iota
	// Fresh: the program was not attached; it is now.
	Fresh
	// Again: egressd's filter was gone, deleted behind its back (with the clsact qdisc); it is
	// attached again.
	Again
)

// Attach keeps the program attached to the interface name of index idx: it attaches it there
// if it is not, swaps it in for a predecessor's, and looks again for another program at the
// hook when due. q carries what this sync learnt of the interface's qdisc from one hook's
// attacher to the other's (a new Qdisc per interface and sync).
func (a *Attacher) Attach(name string, idx int, q *Qdisc) (Outcome, error) {
	at, ok := a.links[name]
	outcome := Kept
	if ok && at.adopted {
		err := a.update(at)
		if err != nil && at.link == nil {
			err, outcome = a.addFilter(idx, q), Again // its clsact qdisc gone since New adopted it
		}
		if err != nil {
			return Kept, fmt.Errorf("update %s on %s to this agent's: %w", a.hook.program, name, err)
		}
		at.adopted = false
	}
	if ok && (at.link != nil || time.Since(at.checked) < recheck) {
		return outcome, nil
	}
	others, present, err := a.othersAt(idx, q)
	if err != nil {
		return Kept, fmt.Errorf("list the programs at %s of %s: %w", a.hook.direction(), name, err)
	}
	switch {
	case ok && !others:
		if !present {
			if err := a.addFilter(idx, q); err != nil {
				return Kept, fmt.Errorf("attach %s to %s again (its filter was removed): %w", a.hook.program, name, err)
			}
			outcome = Again
		}
		at.checked = time.Now()
		return outcome, nil
	case ok: // another program came after our filter: first in the tcx chain instead
		a.cniPrograms = true
		l, err := a.attachLink(name, idx)
		if err != nil {
			return Kept, fmt.Errorf("attach %s to %s before the program added there: %w", a.hook.program, name, err)
		}
		a.links[name] = &attached{link: l, ifindex: idx}
		return outcome, a.deleteFilter(idx)
	case others || a.linkFirst():
		a.cniPrograms = true
		l, err := a.attachLink(name, idx)
		if err != nil {
			return Kept, fmt.Errorf("attach %s to %s: %w", a.hook.program, name, err)
		}
		a.links[name] = &attached{link: l, ifindex: idx}
	default:
		if err := a.addFilter(idx, q); err != nil {
			return Kept, fmt.Errorf("attach %s to %s: %w", a.hook.program, name, err)
		}
		a.links[name] = &attached{ifindex: idx, checked: time.Now()}
	}
	return Fresh, nil
}

// linkFirst tells whether a new interface gets a tcx link rather than a filter though no
// other program runs at its hook yet: where the node's CNI runs its own (cniPrograms).
func (a *Attacher) linkFirst() bool {
	if !a.cniPrograms {
		_, err := a.nl.LinkByName(ciliumHost)
		a.cniPrograms = err == nil
	}
	return a.cniPrograms
}

// ciliumHost is the device Cilium's agent makes on every node it runs on.
const ciliumHost = "cilium_host"

// Recheck makes the next Attach of the interface of index idx (0: of every interface) look at
// its hook again.
func (a *Attacher) Recheck(idx int) {
	for _, at := range a.links {
		if idx == 0 || at.ifindex == idx {
			at.checked = time.Time{}
		}
	}
}

func (a *Attacher) update(at *attached) error {
	if at.link != nil {
		return at.link.Update(a.prog)
	}
	return a.replaceFilter(at.ifindex)
}

func (a *Attacher) detach(at *attached) error {
	if at.link != nil {
		return errors.Join(at.link.Unpin(), at.link.Close())
	}
	return a.deleteFilter(at.ifindex)
}

// Attached lists the interfaces the program is attached to.
func (a *Attacher) Attached() []string {
	var out []string
	for name := range a.links {
		out = append(out, name)
	}
	return out
}

// Close releases file descriptors; what is attached stays.
func (a *Attacher) Close() {
	for _, at := range a.links {
		if at.link != nil {
			at.link.Close()
		}
	}
	a.nl.Close()
}

func (h Hook) direction() string {
	if h.parent == netlink.HANDLE_MIN_INGRESS {
		return "ingress"
	}
	return "egress"
}
