package tc

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
)

// ServiceWildcard is Cilium's load balancer holding a wildcard entry (the address, any port,
// any protocol) for a load-balancer IP: with kube-proxy replacement, its program at ingress of
// the node's devices drops every packet to that IP on a port no Service has, the replies to a
// source NAT to it among them (bpf-lb-enable-wildcard-entries, on by default).
var ServiceWildcard = Conflict{Program: ciliumFromNetdev, Setting: "bpf-lb-enable-wildcard-entries"}

// ciliumFromNetdev is Cilium's program at ingress of the node's devices (bpf_host.c).
const ciliumFromNetdev = "cil_from_netdev"

// ServiceWildcards are those of addrs for which Cilium's load balancer, as the programs at
// ingress of the node's devices (current network namespace) see it, holds a wildcard entry.
// None when no device runs Cilium's program.
func ServiceWildcards(addrs []netip.Addr) ([]netip.Addr, error) {
	if len(addrs) == 0 {
		return nil, nil
	}
	id, err := netdevProgram()
	if err != nil || id == 0 {
		return nil, err
	}
	maps, err := reachableMaps(id)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, m := range maps {
		found, err := wildcardsIn(m, addrs)
		m.Close()
		if err != nil {
			return out, err
		}
		out = append(out, found...)
	}
	return out, nil
}

// maxReachable bounds the programs reachableMaps walks (Cilium's device programs tail-call a
// few dozen).
const maxReachable = 256

// reachableMaps are the maps of the program id and of the programs it can tail-call, through
// the program arrays among them: Cilium's entry programs hand the load balancing to programs
// they tail-call, whose maps the entry does not hold.
func reachableMaps(id ebpf.ProgramID) ([]*ebpf.Map, error) {
	progs, queue := map[ebpf.ProgramID]bool{id: true}, []ebpf.ProgramID{id}
	seen := map[ebpf.MapID]bool{}
	var out []*ebpf.Map
	for len(queue) > 0 && len(progs) <= maxReachable {
		pid := queue[0]
		queue = queue[1:]
		mids, err := mapsOf(pid)
		if err != nil {
			if pid == id {
				return nil, err
			}
			continue // replaced while walking
		}
		for _, mid := range mids {
			if seen[mid] {
				continue
			}
			seen[mid] = true
			m, err := ebpf.NewMapFromID(mid)
			if err != nil {
				continue
			}
			if m.Type() != ebpf.ProgramArray {
				out = append(out, m)
				continue
			}
			// From user space a program array's values read as the programs' IDs.
			var callee ebpf.ProgramID
			for k := range m.MaxEntries() {
				if m.Lookup(k, &callee) == nil && !progs[callee] {
					progs[callee] = true
					queue = append(queue, callee)
				}
			}
			m.Close()
		}
	}
	return out, nil
}

// mapsOf are the IDs of the maps the program id uses.
func mapsOf(id ebpf.ProgramID) ([]ebpf.MapID, error) {
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return nil, err
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return nil, err
	}
	ids, ok := info.MapIDs()
	if !ok {
		return nil, fmt.Errorf("the kernel lists no maps of program %d", id)
	}
	return ids, nil
}

// netdevProgram is the ID of Cilium's program at ingress of the first device that runs it, 0
// if none does.
func netdevProgram() (ebpf.ProgramID, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, err
	}
	for _, ifi := range ifs {
		progs, err := queryIndex(perRequest, ifi.Index)
		if err != nil {
			continue // gone, or no clsact: no program of Cilium's either
		}
		for _, p := range progs {
			if p.Name == ciliumFromNetdev || p.Name == kernelName(ciliumFromNetdev) {
				return p.ID, nil
			}
		}
	}
	return 0, nil
}

// wildcardsIn are those of addrs with a wildcard entry in m, when m is Cilium's service map of
// their family (cilium_lb4_services_v2, cilium_lb6_services_v2; bpf/lib/lb.h): keys of the
// address, dport and backend_slot 0, protocol IPPROTO_ANY (0), scope external (0).
func wildcardsIn(m *ebpf.Map, addrs []netip.Addr) ([]netip.Addr, error) {
	mi, err := m.Info()
	if err != nil {
		return nil, err
	}
	var v6 bool
	switch mi.Name {
	case kernelName("cilium_lb4_services_v2"):
	case kernelName("cilium_lb6_services_v2"):
		v6 = true
	default:
		return nil, nil
	}
	addrLen := 4
	if v6 {
		addrLen = 16
	}
	if want := addrLen + 8; int(mi.KeySize) != want {
		return nil, fmt.Errorf("%s: keys of %d bytes, not the %d of Cilium's lb key this egressd knows", mi.Name, mi.KeySize, want)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if a.Is6() != v6 {
			continue
		}
		key := make([]byte, mi.KeySize) // after the address all 0: the wildcard's
		copy(key, a.AsSlice())
		val := make([]byte, mi.ValueSize)
		if err := m.Lookup(key, &val); err == nil {
			out = append(out, a)
		} else if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, fmt.Errorf("%s: %w", mi.Name, err)
		}
	}
	return out, nil
}
