package nft

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A pod's NAT is decided once per connection, on its first packet, and conntrack keeps it: a
// pod whose egress IP moves keeps the NAT its flows started with (the old egress IP's SNAT, the
// identity SNAT of steering, the CNI's masquerade) for as long as they last, and a UDP stream
// or a long TCP connection then leaves with the wrong source or is dropped by the guard for
// good. So when the NAT this node wants for a pod address changes (its SNAT element added,
// changed or removed, or its address guarded or no longer), the conntrack entries of that
// address's connections to destinations outside the exempt networks are deleted after the
// table is written, and their next packet is NATed afresh. (Upstream OVN-Kubernetes does the
// egress NAT in the egress node's own conntrack zone, so its flows follow a move without this.)

// natChanges returns the pod addresses whose NAT changed between two contents of the sets.
func natChanges(old, want contents) []netip.Addr {
	var out []netip.Addr
	for _, f := range [][2]string{{snat4Set, guarded4Set}, {snat6Set, guarded6Set}} {
		snat, guarded := f[0], f[1]
		keys := map[string]bool{}
		for _, c := range []contents{old, want} {
			for _, set := range []string{snat, guarded} {
				for k := range c[set] {
					keys[k] = true
				}
			}
		}
		for k := range keys {
			o, oSNAT := old[snat][k]
			w, wSNAT := want[snat][k]
			_, oGuarded := old[guarded][k]
			_, wGuarded := want[guarded][k]
			if oSNAT != wSNAT || o.data != w.data || oGuarded != wGuarded {
				if a, ok := netip.AddrFromSlice([]byte(k)); ok {
					out = append(out, a)
				}
			}
		}
	}
	return out
}

// podFlows matches the conntrack entries of connections from pods to destinations outside
// exempt.
type podFlows struct {
	pods   map[netip.Addr]bool
	exempt []netip.Prefix
}

func (f podFlows) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	src, ok := netip.AddrFromSlice(flow.Forward.SrcIP)
	if !ok || !f.pods[src.Unmap()] {
		return false
	}
	dst, ok := netip.AddrFromSlice(flow.Forward.DstIP)
	if !ok {
		return false
	}
	dst = dst.Unmap()
	for _, p := range f.exempt {
		if p.Contains(dst) {
			return false
		}
	}
	return true
}

// flushFlows deletes the conntrack entries of the pods whose NAT changed (t.unflushed), in the
// namespace of the table; they stay to flush on error.
func (t *Table) flushFlows(exempt []netip.Prefix) error {
	if len(t.unflushed) == 0 {
		return nil
	}
	if t.ct == nil {
		return errors.New("no conntrack netlink socket")
	}
	f := podFlows{pods: t.unflushed, exempt: exempt}
	var errs []error
	for _, family := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		if _, err := t.ct.ConntrackDeleteFilters(netlink.ConntrackTable, family, f); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delete the conntrack entries of pods whose NAT changed: %w", err)
	}
	t.unflushed = map[netip.Addr]bool{}
	return nil
}
