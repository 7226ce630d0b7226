package kernel

import (
	"errors"

	"github.com/vishvananda/netlink"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/tc"
)

// portOf is the veth port of bridge behind which the pod address ip is: the one of the pod's
// host-side interfaces (its CNI ADD) that is a port of the bridge, else the port it was written
// with, if that is still one (a restarted agent has not seen the pod's ADD); 0: unknown.
func (ls *linkSet) portOf(bridge int, host []string, written int) int {
	isPort := func(l netlink.Link) bool {
		return l != nil && l.Type() == "veth" && l.Attrs().MasterIndex == bridge
	}
	for _, name := range host {
		if l := ls.byName[name]; isPort(l) {
			return l.Attrs().Index
		}
	}
	if written != 0 && isPort(ls.byIndex[written]) {
		return written
	}
	return 0
}

// ports finds the bridge port of every address of s facing a bridge (faced.ports).
func (c *classifierFacility) ports(s *dataplane.State, f *faced) {
	if f.links == nil {
		return
	}
	for _, p := range s.Classifier.Pods {
		for _, ip := range p.IPs {
			fc, ok := f.byAddr[ip]
			if l := f.links.byIndex[fc.index]; !ok || l == nil || l.Type() != "bridge" {
				continue
			}
			if port := f.links.portOf(fc.index, p.HostInterfaces, c.classifier.WrittenPort(ip)); port != 0 {
				f.ports[ip] = port
			}
		}
	}
}

// guards is what a sync guards: the pod-facing interfaces whose sources the classifier checks,
// the ports of those that are bridges (name to index) with the pods known behind each.
type guards struct {
	interfaces []int
	ports      map[string]int
	owners     map[int][]dataplane.Origin // by port
	claimed    []int                      // the ports a pod is known behind
}

// guardsFor are the guards of the interfaces of want (name to index) that face pods alone;
// without the list of interfaces (f.links nil), none (and guard changes nothing).
func (a *attachFacility) guardsFor(s *dataplane.State, f faced, want map[string]int) *guards {
	if f.links == nil {
		return nil
	}
	g := &guards{interfaces: a.guardable(want, f.links), ports: map[string]int{}, owners: map[int][]dataplane.Origin{}}
	bridges := map[int]bool{}
	for _, idx := range g.interfaces {
		if f.links.byIndex[idx].Type() != "bridge" {
			continue
		}
		bridges[idx] = true
		for _, p := range f.links.ports[idx] {
			g.ports[p.Attrs().Name] = p.Attrs().Index
		}
	}
	for _, p := range s.Classifier.Pods {
		for _, ip := range p.IPs {
			if port := f.ports[ip]; port != 0 && bridges[f.byAddr[ip].index] {
				if len(g.owners[port]) == 0 {
					g.claimed = append(g.claimed, port)
				}
				g.owners[port] = append(g.owners[port], p.Origin)
			}
		}
	}
	return g
}

// guard makes the classifier check the sources of what comes in on the guarded interfaces and
// keeps the port guard on exactly the guarded bridges' ports: before the classifier runs on a
// new interface, as it judges sources from its first packet. It returns the failures of pods
// whose port could not be guarded.
func (a *attachFacility) guard(g *guards) map[dataplane.Origin]error {
	if g == nil {
		return nil
	}
	if err := a.classifier.Guard(g.interfaces, g.claimed); err != nil {
		a.log.Error("write the interfaces whose pods' sources are checked", "err", err)
	}
	failed := map[dataplane.Origin]error{}
	blame := func(name string, err error) {
		owners := g.owners[g.ports[name]]
		if len(owners) == 0 {
			a.log.Error("guard a bridge port", "interface", name, "err", err)
		}
		for _, o := range owners {
			failed[o] = errors.Join(failed[o], err)
		}
	}
	for name, err := range a.portGuard.Detach(g.ports) {
		blame(name, err)
	}
	for name, idx := range g.ports {
		if _, err := a.portGuard.Attach(name, idx, &tc.Qdisc{}); err != nil {
			blame(name, err)
		}
	}
	return failed
}

// guardable are the indices of the interfaces of want (name to index) that face pods alone: a
// pod's veth, or a bridge whose every port is a veth. Their packets must carry the address of
// a pod behind them (the classifier's anti-spoofing). A bridge that also has another port (the
// node's uplink enslaved to share the LAN with the pods, a tunnel) passes what comes from
// there as before: its sources are not the pods' to check; it is said once.
func (a *attachFacility) guardable(want map[string]int, ls *linkSet) []int {
	var out []int
	for name, idx := range want {
		l := ls.byIndex[idx]
		if l == nil || l.Attrs().Name != name {
			continue // renamed or gone since: the next sync looks again
		}
		switch l.Type() {
		case "veth":
			out = append(out, idx)
		case "bridge":
			var other netlink.Link
			for _, p := range ls.ports[idx] {
				if p.Type() != "veth" {
					other = p
					break
				}
			}
			if other == nil {
				out = append(out, idx)
			} else {
				a.unguarded(name, "bridge port "+other.Attrs().Name+" is a "+other.Type()+", not a pod's veth")
			}
		default:
			a.unguarded(name, "a "+l.Type()+" interface, not a veth or a bridge of veths")
		}
	}
	return out
}

// unguarded says once per interface that the sources of its packets are not checked.
func (a *attachFacility) unguarded(name, why string) {
	if a.unguardedSaid[name] == why {
		return
	}
	a.unguardedSaid[name] = why
	a.log.Warn("pod-facing interface does not face pods alone: the sources of its packets are not checked (anti-spoofing)", "interface", name, "why", why)
}
