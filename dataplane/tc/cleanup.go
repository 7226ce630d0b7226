package tc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
)

// Cleanup detaches egressd's programs from every interface of the network namespace: the tcx
// links pinned under pinRoot and the filters (egressctl cleanup).
func Cleanup(pinRoot string) error {
	errs := []error{cleanupLinks(LinksDir(pinRoot))}
	links, err := netlink.LinkList()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list interfaces: %w", err))...)
	}
	for _, l := range links {
		idx := l.Attrs().Index
		var parents []uint32
		for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
			fs, err := filtersAt(perRequest, idx, parent)
			if err != nil {
				errs = append(errs, fmt.Errorf("list the filters of %s: %w", l.Attrs().Name, err))
			}
			for _, f := range fs {
				if ours(f) {
					parents = append(parents, parent)
				}
			}
		}
		if len(parents) > 0 {
			if err := deleteFilters(perRequest, idx, parents...); err != nil {
				errs = append(errs, fmt.Errorf("delete egressd's filters of %s: %w", l.Attrs().Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func cleanupLinks(dir string) error {
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
