// Package tcx keeps egressd's programs attached to exactly the pod-facing interfaces it is
// given: the classifier at tcx ingress (packets from the pods) and its companion at tcx egress
// (packets towards the pods), each through a bpf link pinned under <pin root>/links, so that they
// keep running while the agent restarts or upgrades: a new agent adopts the pinned links and, at
// its first Sync (once its maps are written), swaps its program in with a link update, never
// detach-then-attach.
package tcx

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// ProgramName is the classifier's name as bpftool and link.QueryPrograms show it.
const ProgramName = "egressd_frompod"

// Hook is where on a pod-facing interface a program runs.
type Hook struct {
	attach    ebpf.AttachType
	pinPrefix string
	program   string // its name, for errors
}

// The hooks: Ingress runs the classifier on what the pods send, Egress its companion on what
// is sent to them.
var (
	Ingress = Hook{ebpf.AttachTCXIngress, "tcx_ingress_", ProgramName}
	Egress  = Hook{ebpf.AttachTCXEgress, "tcx_egress_", "egressd_topod"}
)

// Attacher owns the links of one program at one hook under one pin root.
type Attacher struct {
	dir   string
	hook  Hook
	prog  *ebpf.Program
	links map[string]*attached // by interface name
}

type attached struct {
	link    link.Link
	ifindex int
	// adopted: a predecessor's program still runs on it, until Sync swaps ours in.
	adopted bool
}

// LinksDir is where the links of a pin root are pinned.
func LinksDir(pinRoot string) string { return filepath.Join(pinRoot, "links") }

// New adopts the links a previous agent pinned: those whose interface is gone are unpinned; the
// others keep running the predecessor's program, with the maps it was loaded with, until Sync.
// (After an upgrade that changed a map's layout, prog's maps are new and empty until the first
// Apply: swapping it in earlier would stop enforcement for that long.)
func New(pinRoot string, hook Hook, prog *ebpf.Program) (*Attacher, error) {
	a := &Attacher{dir: LinksDir(pinRoot), hook: hook, links: map[string]*attached{}, prog: prog}
	if err := os.MkdirAll(a.dir, 0o755); err != nil {
		return nil, fmt.Errorf("pin directory %s (is bpffs mounted?): %w", a.dir, err)
	}
	entries, err := os.ReadDir(a.dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), a.hook.pinPrefix)
		if !ok {
			continue
		}
		if err := a.adopt(name, filepath.Join(a.dir, e.Name())); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func (a *Attacher) adopt(ifname, path string) error {
	l, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		os.Remove(path) // not a link (any more): nothing is attached through it
		return nil
	}
	info, err := l.Info()
	var ifindex int
	if err == nil && info.TCX() != nil {
		ifindex = int(info.TCX().Ifindex)
	}
	if ifi, ierr := net.InterfaceByName(ifname); ierr != nil || ifi.Index != ifindex {
		// The interface went away (or its name now belongs to another one): the link is defunct.
		return errors.Join(l.Unpin(), l.Close())
	}
	a.links[ifname] = &attached{link: l, ifindex: ifindex, adopted: true}
	return nil
}

// Sync attaches the classifier to every interface of want (name -> ifindex) and detaches it
// from every other interface it owns. It returns an error per interface that failed.
func (a *Attacher) Sync(want map[string]int) map[string]error {
	errs := map[string]error{}
	for name, at := range a.links {
		if idx, ok := want[name]; ok && idx == at.ifindex {
			continue
		}
		if err := errors.Join(at.link.Unpin(), at.link.Close()); err != nil {
			errs[name] = fmt.Errorf("detach from %s: %w", name, err)
		}
		delete(a.links, name)
	}
	for name, idx := range want {
		if at, ok := a.links[name]; ok {
			if at.adopted {
				if err := at.link.Update(a.prog); err != nil {
					errs[name] = fmt.Errorf("update the link on %s to this agent's %s: %w", name, a.hook.program, err)
					continue
				}
				at.adopted = false
			}
			continue
		}
		l, err := link.AttachTCX(link.TCXOptions{Interface: idx, Program: a.prog, Attach: a.hook.attach})
		if err != nil {
			errs[name] = fmt.Errorf("attach %s to %s: %w", a.hook.program, name, err)
			continue
		}
		if err := l.Pin(filepath.Join(a.dir, a.hook.pinPrefix+name)); err != nil {
			l.Close()
			errs[name] = fmt.Errorf("pin link of %s: %w", name, err)
			continue
		}
		a.links[name] = &attached{link: l, ifindex: idx}
	}
	return errs
}

// Attached lists the interfaces the program is attached to.
func (a *Attacher) Attached() []string {
	var out []string
	for name := range a.links {
		out = append(out, name)
	}
	return out
}

// Close releases file descriptors; pinned links stay attached.
func (a *Attacher) Close() {
	for _, at := range a.links {
		at.link.Close()
	}
}

// Cleanup detaches every link pinned under pinRoot (egressctl cleanup).
func Cleanup(pinRoot string) error {
	dir := LinksDir(pinRoot)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if l, err := link.LoadPinnedLink(p, nil); err == nil {
			errs = append(errs, l.Unpin(), l.Close())
		} else {
			errs = append(errs, os.Remove(p))
		}
	}
	return errors.Join(append(errs, os.Remove(dir))...)
}
