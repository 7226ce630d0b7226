package kernel

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// linkSet is the namespace's interfaces as a sync reads them, once.
type linkSet struct {
	byIndex map[int]netlink.Link
	byName  map[string]netlink.Link
	ports   map[int][]netlink.Link // by the index of their master (a bridge)
}

func newLinkSet(links map[int]netlink.Link) *linkSet {
	ls := &linkSet{byIndex: links, byName: make(map[string]netlink.Link, len(links)), ports: map[int][]netlink.Link{}}
	for _, l := range links {
		ls.byName[l.Attrs().Name] = l
		if m := l.Attrs().MasterIndex; m != 0 {
			ls.ports[m] = append(ls.ports[m], l)
		}
	}
	return ls
}

// links reads the namespace's interfaces, once per sync; the set is read until the next call.
// A full list costs a millisecond per hundred or so veths, and a new pod's CNI ADD waited for
// it; so while the link events are watched, the list is kept, and only the interfaces that an
// event named since (linkChanged) are read again. What a sync reads of them (name, type,
// master) changes only with an event.
func (f *facings) links() (*linkSet, error) {
	f.mu.Lock()
	kept, again, era := f.kept, f.readAgain, f.era
	f.readAgain = map[int]bool{}
	f.mu.Unlock()
	var err error
	if kept == nil {
		kept, err = f.listLinks()
	} else if err = f.reread(kept, again); err != nil {
		kept, err = f.listLinks()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case err != nil:
		f.forgetLinks()
		return nil, err
	case f.trusted && f.era == era: // else the events were lost, or too many, meanwhile
		f.kept = kept
	}
	return newLinkSet(kept), nil
}

// maxReadAgain bounds the interfaces read again one by one; past it, they are listed.
const maxReadAgain = 256

// forgetLinks makes the next sync list the interfaces. f.mu held.
func (f *facings) forgetLinks() {
	f.kept, f.era = nil, f.era+1
	clear(f.readAgain)
}

func (f *facings) listLinks() (map[int]netlink.Link, error) {
	links, err := f.h.LinkList()
	if err != nil {
		return nil, err
	}
	out := make(map[int]netlink.Link, len(links))
	for _, l := range links {
		out[l.Attrs().Index] = l
	}
	return out, nil
}

// reread reads the interfaces of indices again into links; one that is gone leaves it.
func (f *facings) reread(links map[int]netlink.Link, indices map[int]bool) error {
	for i := range indices {
		l, err := f.h.LinkByIndex(i)
		var gone netlink.LinkNotFoundError
		switch {
		case errors.As(err, &gone):
			delete(links, i)
		case err != nil:
			return fmt.Errorf("read interface %d again: %w", i, err)
		default:
			links[i] = l
		}
	}
	return nil
}

// linkChanged notes that the interface of index changed, came or went (a link event): the
// pod addresses behind it are looked up again, and it is read again.
func (f *facings) linkChanged(index int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ip, fc := range f.byAddr {
		if fc.index == index {
			delete(f.byAddr, ip)
		}
	}
	switch {
	case !f.trusted: // listed at every sync
	case len(f.readAgain) >= maxReadAgain:
		f.forgetLinks()
	default:
		f.readAgain[index] = true
	}
}
