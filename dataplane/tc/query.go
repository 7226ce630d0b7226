package tc

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
)

// Program is one program at the ingress of an interface.
type Program struct {
	Name string
	ID   ebpf.ProgramID
	// Attachment says how it is attached: "tcx link <id>" or "tc filter pref <p> handle <h>".
	Attachment string
}

// Query lists the programs at ingress of the interface ifname in the current network namespace,
// whoever attached them, in the order they run: tcx links, then tc filters (Debian's bpftool
// 7.1 cannot list tcx programs).
func Query(ifname string) ([]Program, error) { return query(perRequest, ifname) }

func query(h *netlink.Handle, ifname string) ([]Program, error) {
	// Not net.InterfaceByName, which dumps every interface of the node to find one.
	l, err := h.LinkByName(ifname)
	if err != nil {
		return nil, err
	}
	return queryIndex(h, l.Attrs().Index)
}

// queryIndex is Query of the interface of index.
func queryIndex(h *netlink.Handle, index int) ([]Program, error) {
	res, err := link.QueryPrograms(link.QueryOptions{Target: index, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		return nil, err
	}
	var out []Program
	for _, p := range res.Programs {
		prog, err := ebpf.NewProgramFromID(p.ID)
		if err != nil {
			return nil, err
		}
		info, err := prog.Info()
		prog.Close()
		if err != nil {
			return nil, err
		}
		id, _ := p.LinkID()
		out = append(out, Program{Name: info.Name, ID: p.ID, Attachment: fmt.Sprintf("tcx link %d", id)})
	}
	filters, err := filtersAt(h, index, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return nil, err
	}
	for _, f := range filters {
		a := f.Attrs()
		p := Program{Name: f.Type()}
		if b, ok := f.(*netlink.BpfFilter); ok {
			p.Name, p.ID = b.Name, ebpf.ProgramID(b.Id)
		}
		p.Attachment = fmt.Sprintf("tc filter pref %d handle %#x", a.Priority, a.Handle)
		out = append(out, p)
	}
	return out, nil
}
