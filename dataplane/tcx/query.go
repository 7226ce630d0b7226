package tcx

import (
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Program is one program attached at a tcx hook of an interface.
type Program struct {
	Name   string
	LinkID link.ID
}

// Query lists the programs at ingress of the interface ifname in the current network namespace,
// whoever attached them (Debian's bpftool 7.1 cannot list tcx programs).
func Query(ifname string) ([]Program, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	res, err := link.QueryPrograms(link.QueryOptions{Target: ifi.Index, Attach: ebpf.AttachTCXIngress})
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
		out = append(out, Program{Name: info.Name, LinkID: id})
	}
	return out, nil
}
