package kernel

import (
	"github.com/vishvananda/netlink"
)

// guardable are the indices of the interfaces of want (name to index) that face pods alone: a
// pod's veth, or a bridge whose every port is a veth. Their packets must carry the address of
// a pod behind them (the classifier's anti-spoofing). A bridge that also has another port (the
// node's uplink enslaved to share the LAN with the pods, a tunnel) passes what comes from
// there as before: its sources are not the pods' to check; it is said once.
func (d *Applier) guardable(want map[string]int) []int {
	links, err := d.facings.h.LinkList()
	if err != nil {
		d.log.Error("list interfaces to find those facing pods alone; sources are not checked this sync", "err", err)
		return nil
	}
	byIndex := map[int]netlink.Link{}
	ports := map[int][]netlink.Link{}
	for _, l := range links {
		byIndex[l.Attrs().Index] = l
		if m := l.Attrs().MasterIndex; m != 0 {
			ports[m] = append(ports[m], l)
		}
	}
	var out []int
	for name, idx := range want {
		l := byIndex[idx]
		if l == nil || l.Attrs().Name != name {
			continue // renamed or gone since: the next sync looks again
		}
		switch l.Type() {
		case "veth":
			out = append(out, idx)
		case "bridge":
			var other netlink.Link
			for _, p := range ports[idx] {
				if p.Type() != "veth" {
					other = p
					break
				}
			}
			if other == nil {
				out = append(out, idx)
			} else {
				d.unguarded(name, "bridge port "+other.Attrs().Name+" is a "+other.Type()+", not a pod's veth")
			}
		default:
			d.unguarded(name, "a "+l.Type()+" interface, not a veth or a bridge of veths")
		}
	}
	return out
}

// unguarded says once per interface that the sources of its packets are not checked.
func (d *Applier) unguarded(name, why string) {
	if d.unguardedSaid[name] == why {
		return
	}
	d.unguardedSaid[name] = why
	d.log.Warn("pod-facing interface does not face pods alone: the sources of its packets are not checked (anti-spoofing)", "interface", name, "why", why)
}
