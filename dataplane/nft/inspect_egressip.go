package nft

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
)

// SNATEntry is one served pod address and the egress IP its traffic leaves with from this node.
type SNATEntry struct {
	Pod, EgressIP netip.Addr
}

// SNATEntries reads the EgressIP SNAT maps of the table in the current network namespace, for
// egressctl: what this node rewrites, whoever programmed it.
func SNATEntries() ([]SNATEntry, error) {
	var out []SNATEntry
	err := readElements([]string{snat4Set, snat6Set}, func(e nftables.SetElement) {
		pod, ok1 := netip.AddrFromSlice(e.Key)
		eip, ok2 := netip.AddrFromSlice(e.Val)
		if ok1 && ok2 {
			out = append(out, SNATEntry{Pod: pod, EgressIP: eip})
		}
	})
	slices.SortFunc(out, func(a, b SNATEntry) int { return a.Pod.Compare(b.Pod) })
	return out, err
}

// PodEgress is what this node's table does for EgressIP with a pod's packets to destinations
// that are not exempt (cluster networks, node addresses).
type PodEgress struct {
	// SNATTo is the egress IP they leave this node with; invalid when this node serves none.
	SNATTo netip.Addr
	// Guarded: an EgressIP selects the pod, so they are dropped rather than leave this node
	// unmarked with the pod address (a leak).
	Guarded bool
}

// EgressOf reads the SNAT maps and guarded sets of the table in the current network namespace
// for pod, for egressctl's trace.
func EgressOf(pod netip.Addr) (PodEgress, error) {
	snat, err := SNATEntries()
	if err != nil {
		return PodEgress{}, err
	}
	var out PodEgress
	if i := slices.IndexFunc(snat, func(e SNATEntry) bool { return e.Pod == pod }); i >= 0 {
		out.SNATTo = snat[i].EgressIP
	}
	err = readElements([]string{family(pod, guarded4Set, guarded6Set)}, func(e nftables.SetElement) {
		out.Guarded = out.Guarded || slices.Equal(e.Key, pod.AsSlice())
	})
	return out, err
}

// readElements calls f with every element of the sets (or maps) named, in the table of the
// current network namespace; no table means no elements.
func readElements(names []string, f func(nftables.SetElement)) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	if _, err := c.ListTableOfFamily(TableName, nftables.TableFamilyINet); err != nil {
		return nil // no table inet egressd: nothing is programmed here
	}
	for _, name := range names {
		set, err := c.GetSetByName(table, name)
		if err != nil {
			return fmt.Errorf("set %s of table inet %s: %w", name, TableName, err)
		}
		elems, err := c.GetSetElements(set)
		if err != nil {
			return fmt.Errorf("elements of %s: %w", name, err)
		}
		for _, e := range elems {
			f(e)
		}
	}
	return nil
}
