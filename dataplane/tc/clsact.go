package tc

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// egressd's tc filters: in the interface's clsact qdisc, at this priority and handle, named
// after the program (tc filter show dev <if> ingress: "pref 49152 bpf ... handle 0x1
// egressd_frompod direct-action"). The priority is far from the 1 that CNIs' own filters
// usually take, so that neither replaces the other.
const (
	Priority     = 49152
	filterHandle = 1
)

// ours tells whether a filter is egressd's.
func ours(f netlink.Filter) bool {
	b, ok := f.(*netlink.BpfFilter)
	return ok && b.Priority == Priority && b.Handle == filterHandle && strings.HasPrefix(b.Name, "egressd_")
}

// Qdisc is what a sync learnt of an interface's clsact qdisc. The hooks' attachers share it
// while they attach the interface in turn, so that the second need not ask the kernel again:
// each request waits for the RTNL lock, which the CNI plugins setting up other pods hold
// during a burst. A new pod interface takes six requests instead of eight.
type Qdisc struct {
	exists bool
	// added: egressd added it in this sync, so it holds egressd's filters only.
	added bool
}

// perRequest makes a netlink socket per request, in the calling thread's network namespace:
// for what runs once (a query, egressctl cleanup). What runs at every sync keeps a socket
// (Attacher, PodConflicts): making one took as long as the request.
var perRequest = &netlink.Handle{}

// filtersAt lists the filters of the interface's clsact qdisc in one direction (none without
// the qdisc).
func filtersAt(h *netlink.Handle, idx int, parent uint32) ([]netlink.Filter, error) {
	fs, err := h.FilterList(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: idx}}, parent)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil, nil // no clsact qdisc
	}
	return fs, err
}

// adoptFilters adopts egressd's filters of the hook on the namespace's interfaces.
func (a *Attacher) adoptFilters() error {
	links, err := a.nl.LinkList()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	for _, l := range links {
		name := l.Attrs().Name
		if _, ok := a.links[name]; ok {
			continue // a tcx link
		}
		fs, err := filtersAt(a.nl, l.Attrs().Index, a.hook.parent)
		if err != nil {
			return fmt.Errorf("list the filters at %s of %s: %w", a.hook.direction(), name, err)
		}
		for _, f := range fs {
			// Ingress and Port share the hook (never on the same interface): by the name.
			if ours(f) && f.(*netlink.BpfFilter).Name == a.hook.program {
				a.links[name] = &attached{ifindex: l.Attrs().Index, adopted: true}
			}
		}
	}
	return nil
}

// addFilter attaches the program as egressd's filter of the interface, adding the clsact qdisc
// unless q knows it exists.
func (a *Attacher) addFilter(idx int, q *Qdisc) error {
	if !q.exists {
		err := a.nl.QdiscAdd(&netlink.GenericQdisc{QdiscType: "clsact", QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: idx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}})
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add the clsact qdisc: %w", err)
		}
		*q = Qdisc{exists: true, added: err == nil}
	}
	return a.replaceFilter(idx)
}

// replaceFilter swaps the program in for the one egressd's filter of the interface runs
// (atomically: each packet sees either program).
func (a *Attacher) replaceFilter(idx int) error {
	return a.nl.FilterReplace(&netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: a.hook.parent, Handle: filterHandle,
			Priority: Priority, Protocol: unix.ETH_P_ALL},
		Fd: a.prog.FD(), Name: a.hook.program, DirectAction: true})
}

// deleteFilter removes egressd's filter of the hook, and the clsact qdisc once no filter of any
// direction is left in it (the interface gone: nothing to do).
func (a *Attacher) deleteFilter(idx int) error {
	return deleteFilters(a.nl, idx, a.hook.parent)
}

func deleteFilters(h *netlink.Handle, idx int, parents ...uint32) error {
	for _, parent := range parents {
		err := h.FilterDel(&netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: parent,
			Handle: filterHandle, Priority: Priority, Protocol: unix.ETH_P_ALL}})
		if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) && !errors.Is(err, unix.EINVAL) {
			return err
		}
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := filtersAt(h, idx, parent)
		if err != nil || len(fs) > 0 {
			return nil // another filter keeps the qdisc (or the interface is gone)
		}
	}
	err := h.QdiscDel(&netlink.GenericQdisc{QdiscType: "clsact", QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: idx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}})
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("delete the emptied clsact qdisc: %w", err)
	}
	return nil
}
