package tc

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/vishvananda/netlink"
)

// Conflict is a setting of a program a CNI runs on egressd's path that undoes what egressd
// programs: after its classifier at ingress of a pod's interface (PodConflicts), at ingress of
// the node's devices (ServiceWildcards), or at their egress (CompiledConflicts).
type Conflict struct {
	// Program is the program's name as its CNI names it.
	Program string
	// Setting is the program's config variable that is on.
	Setting string
}

// Effect is what the conflict does to the traffic, and what to set instead.
func (c Conflict) Effect() string { return effects[c] }

// podSettings are the known settings of the programs after the classifier. Cilium keeps them
// in the program's .rodata.config map, which the program's BTF describes (bpf_lxc.c, v1.20).
var podSettings = []Conflict{
	{ciliumFromContainer, "enable_identity_mark"}, {ciliumFromContainer, "enable_bpf_host_routing"},
}

// effects are what each known conflict does.
var effects = map[Conflict]string{
	// set_identity_mark writes the pod's security identity over the whole skb->mark when
	// the program hands the packet to the stack: its bits under egressd's mask are no mark
	// (the guard drops the packet) or, by chance, another steering mark.
	{ciliumFromContainer, "enable_identity_mark"}: "overwrites the packet mark egressd steers with, so the packet is dropped or takes whichever steering path the pod's identity bits name (Cilium: set enableIdentityMark false)",
	// fib_redirect_v4/v6 sends the packet to the egress device from tc, past the host's
	// netfilter and policy routing, where egressd steers, SNATs and guards.
	{ciliumFromContainer, "enable_bpf_host_routing"}: "redirects the packet to its device past the host's routing and netfilter, so it leaves with the node's address, not steered (Cilium: set bpf.hostLegacyRouting true)",
	// lb4_lookup_service finds the wildcard entry of a load-balancer address for any port no
	// Service has, and the caller drops: the replies to egressd's SNAT to that address.
	// snat_v4_nat/snat_v6_nat rewrite the source of what leaves the device for the node's
	// address, after netfilter's postrouting: egressd's SNAT to an egress IP, a load-balancer
	// IP, or its keeping of the pod's address towards a gateway, is undone.
	{ciliumToNetdev, "ENABLE_MASQUERADE_IPV4"}: "masquerades pod traffic at the device's egress, after egressd's steering and source NAT, so it leaves with the node's address (Cilium: set bpf.masquerade false, with enableIPv4Masquerade true for iptables masquerading)",
	{ciliumToNetdev, "ENABLE_MASQUERADE_IPV6"}: "masquerades pod traffic at the device's egress, after egressd's steering and source NAT, so it leaves with the node's address (Cilium: set bpf.masquerade false, with enableIPv6Masquerade true for iptables masquerading)",
	ServiceWildcard: "drops the replies to egressd's source NAT to a load-balancer IP, before netfilter can undo it (Cilium: set bpf-lb-enable-wildcard-entries false)",
}

// PodConflicts finds the known conflicts of the programs after egressd's classifier at ingress
// of pods' interfaces. A loaded program's settings cannot change (Cilium freezes its
// .rodata.config), so each program's are read once and kept while it is still found: a CNI
// that loads its programs again (Cilium restarted with other settings, an endpoint
// regenerated) replaces them in place, past the classifier, with programs of new IDs.
type PodConflicts struct {
	nl        *netlink.Handle
	byProgram map[ebpf.ProgramID][]Conflict
	seen      map[ebpf.ProgramID]bool
}

// NewPodConflicts knows no program yet; it asks the kernel through nl, whose network
// namespace holds the pods' interfaces.
func NewPodConflicts(nl *netlink.Handle) *PodConflicts {
	return &PodConflicts{nl: nl, byProgram: map[ebpf.ProgramID][]Conflict{}, seen: map[ebpf.ProgramID]bool{}}
}

// At are the known conflicts of the programs after egressd's at ingress of ifname.
func (c *PodConflicts) At(ifname string) ([]Conflict, error) {
	progs, err := query(c.nl, ifname)
	if err != nil {
		return nil, err
	}
	var out []Conflict
	after := false
	for _, p := range progs {
		if p.Name == ProgramName {
			after = true
			continue
		}
		if !after {
			continue
		}
		c.seen[p.ID] = true
		cs, ok := c.byProgram[p.ID]
		if !ok {
			if cs, err = settingsOf(p); err != nil {
				return out, fmt.Errorf("%s at ingress of %s: %w", p.Name, ifname, err)
			}
			c.byProgram[p.ID] = cs
		}
		out = append(out, cs...)
	}
	slices.SortFunc(out, func(a, b Conflict) int {
		return cmp.Or(cmp.Compare(a.Program, b.Program), cmp.Compare(a.Setting, b.Setting))
	})
	return slices.Compact(out), nil
}

// Forget forgets the programs not found since the last Forget.
func (c *PodConflicts) Forget() {
	maps.DeleteFunc(c.byProgram, func(id ebpf.ProgramID, _ []Conflict) bool { return !c.seen[id] })
	clear(c.seen)
}

// settingsOf are the known conflicts of the program p.
func settingsOf(p Program) ([]Conflict, error) {
	var out []Conflict
	for _, c := range podSettings {
		if p.Name != c.Program && p.Name != kernelName(c.Program) {
			continue
		}
		on, err := ciliumConfig(p.ID, c.Setting)
		if err != nil {
			return nil, err
		}
		if on {
			out = append(out, c)
		}
	}
	return out, nil
}

// ciliumFromContainer is Cilium's program at ingress of a pod's veth (bpf_lxc.c).
const ciliumFromContainer = "cil_from_container"

// kernelName is a program's name as the kernel keeps it: its first 15 bytes (Query names a
// program by its BTF instead, when it has one).
func kernelName(name string) string { return name[:min(len(name), 15)] }

// ciliumConfig reads the boolean Cilium config variable __config_<name> of the program id from
// its .rodata.config map.
func ciliumConfig(id ebpf.ProgramID, name string) (bool, error) {
	ids, err := mapsOf(id)
	if err != nil {
		return false, err
	}
	for _, mid := range ids {
		m, err := ebpf.NewMapFromID(mid)
		if err != nil {
			continue
		}
		on, found, err := configIn(m, "__config_"+name)
		m.Close()
		if found || err != nil {
			return on, err
		}
	}
	return false, fmt.Errorf("no .rodata.config map holds __config_%s", name)
}

// configIn reads the one-byte variable v of m when m is Cilium's .rodata.config map.
func configIn(m *ebpf.Map, v string) (on, found bool, err error) {
	mi, err := m.Info()
	if err != nil || mi.Name != ".rodata.config" {
		return false, false, err
	}
	bid, ok := mi.BTFID()
	if !ok {
		return false, false, errors.New(".rodata.config has no BTF")
	}
	h, err := btf.NewHandleFromID(bid)
	if err != nil {
		return false, false, err
	}
	defer h.Close()
	spec, err := h.Spec(nil)
	if err != nil {
		return false, false, err
	}
	var sec *btf.Datasec
	if err := spec.TypeByName(".rodata.config", &sec); err != nil {
		return false, false, err
	}
	for _, vs := range sec.Vars {
		if vv, ok := vs.Type.(*btf.Var); ok && vv.Name == v {
			val := make([]byte, mi.ValueSize)
			if err := m.Lookup(uint32(0), &val); err != nil {
				return false, true, err
			}
			if int(vs.Offset) >= len(val) {
				return false, true, fmt.Errorf("%s at offset %d past the map's %d bytes", v, vs.Offset, len(val))
			}
			return val[vs.Offset] != 0, true, nil
		}
	}
	return false, false, nil
}
