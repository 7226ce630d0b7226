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
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	if _, err := c.ListTableOfFamily(TableName, nftables.TableFamilyINet); err != nil {
		return nil, nil // no table inet egressd: nothing is SNATed here
	}
	var out []SNATEntry
	for _, def := range egressIPSets[:2] { // egressip_snat4, egressip_snat6
		set, err := c.GetSetByName(table, def.Name)
		if err != nil {
			return nil, fmt.Errorf("map %s: %w", def.Name, err)
		}
		elems, err := c.GetSetElements(set)
		if err != nil {
			return nil, fmt.Errorf("elements of %s: %w", def.Name, err)
		}
		for _, e := range elems {
			pod, ok1 := netip.AddrFromSlice(e.Key)
			eip, ok2 := netip.AddrFromSlice(e.Val)
			if ok1 && ok2 {
				out = append(out, SNATEntry{Pod: pod, EgressIP: eip})
			}
		}
	}
	slices.SortFunc(out, func(a, b SNATEntry) int { return a.Pod.Compare(b.Pod) })
	return out, nil
}
