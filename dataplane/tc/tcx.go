package tc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf/link"
)

// tcxLink is an attachment through a tcx link.
type tcxLink = link.Link

// LinksDir is where the tcx links of a pin root are pinned.
func LinksDir(pinRoot string) string { return filepath.Join(pinRoot, "links") }

// adoptLinks adopts the tcx links pinned for the hook.
func (a *Attacher) adoptLinks() error {
	if err := os.MkdirAll(a.dir, 0o755); err != nil {
		return fmt.Errorf("pin directory %s (is bpffs mounted?): %w", a.dir, err)
	}
	entries, err := os.ReadDir(a.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), a.hook.pinPrefix)
		if !ok {
			continue
		}
		if err := a.adoptLink(name, filepath.Join(a.dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func (a *Attacher) adoptLink(ifname, path string) error {
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

// attachLink attaches the program first in the hook's tcx chain of the interface and pins the
// link.
func (a *Attacher) attachLink(name string, idx int) (tcxLink, error) {
	l, err := link.AttachTCX(link.TCXOptions{Interface: idx, Program: a.prog, Attach: a.hook.tcx, Anchor: link.Head()})
	if err != nil {
		return nil, err
	}
	if err := l.Pin(filepath.Join(a.dir, a.hook.pinPrefix+name)); err != nil {
		l.Close()
		return nil, fmt.Errorf("pin its link: %w", err)
	}
	return l, nil
}

// othersAt tells whether a program that is not egressd's runs at the hook of the interface (a
// tcx program, or a tc filter: none in a qdisc that egressd added in this sync), and whether
// egressd's filter is there.
func (a *Attacher) othersAt(idx int, q *Qdisc) (others, present bool, err error) {
	res, err := link.QueryPrograms(link.QueryOptions{Target: idx, Attach: a.hook.tcx})
	if err != nil {
		return false, false, err
	}
	if len(res.Programs) > 0 {
		return true, false, nil // ours has no tcx link here (the caller knows)
	}
	if q.added {
		return false, false, nil
	}
	filters, err := filtersAt(a.nl, idx, a.hook.parent)
	if err != nil {
		return false, false, err
	}
	for _, f := range filters {
		if !ours(f) {
			return true, false, nil
		}
		present = true
	}
	return false, present, nil
}
