package kernel

import (
	"errors"
	"net/netip"
	"reflect"
	"time"

	"github.com/egressd/egressd/dataplane"
)

// facility is one kernel facility as Apply runs it. The facilities install in the order of
// Applier.facilities (see the package comment: nothing is selected before what it selects
// exists); install writes the facility's section of the desired state and returns the
// failures by object.
type facility interface {
	name() string
	install(p *pass) map[dataplane.Origin]error
}

// pruner is a facility whose removals of what the state no longer wants wait until every
// facility installed, and run in reverse order. The others remove as they install: nftables in
// its one transaction, the classifier its entries, attach the interfaces it leaves.
type pruner interface {
	facility
	prune(p *pass) error
	// removes says what prune removes, for the log.
	removes() string
}

// sectioned is a facility with nothing to do while what it would write is what it last wrote
// without a failure and the kernel changed under none since (Applier.news). Each of them reads
// the kernel at every install (the links, rules, routes and nexthops; egressd's nftables table)
// and plans its whole section: at full size, most of an EgressFirewall edit's apply went to
// facilities the edit did not touch. Drift that no event tells of (a route deleted in egressd's
// table) is repaired by the next full pass (Options.FullPass).
type sectioned interface {
	facility
	// section is what install would write, from the pass's state and what it reads of the
	// kernel to decide that (the routes it copies, the gateways' MACs), and leaves in the pass
	// for install. It is compared with reflect.DeepEqual: the state's lists are read only, and
	// a list unchanged is mostly the same slice.
	section(p *pass) any
}

// pass is one Apply as the facilities see it: the desired state, and what a facility found
// for those after it.
type pass struct {
	state *dataplane.State
	// up says whether a gateway's BFD session is up (bfdFacility.up).
	up func(netip.Addr) bool
	// routes is the routing state with the routes of egress IPs' interfaces copied in (set by
	// the routing facility, pruned by it).
	routes *dataplane.RoutingState
	// faced is where each pod address's packets come in (set by the classifier facility,
	// attached to by attach).
	faced faced
	// failed are the failures so far: attach tells podsInForce of them.
	failed map[dataplane.Origin]error
	// full: every facility runs, also those whose section did not change (sectioned).
	full bool
	// nftables is the nftables section as its facility would write it (set by its section).
	nftables *dataplane.NftablesState
}

// run installs p's state facility by facility, then prunes in reverse; each phase's time is
// observed under its facility's name, the removals' under "removals". It returns the failures
// by object and the removals that failed by facility (nil when none did). A failure leaves a
// stale rule, route, tunnel entry or address in place: the caller retries soon rather than at
// the next resync, and it is counted and logged.
func (d *Applier) run(p *pass) (failed map[dataplane.Origin]error, removals map[string]error) {
	failed = map[dataplane.Origin]error{}
	p.failed = failed
	// skipped are the facilities with nothing to do; sections, what the others wrote. Once one
	// runs, those after it run too: they may read what it changed (the routes copied from the
	// interface an address was just placed on, the tunnel's device made again).
	skipped, sections := map[string]bool{}, map[string]any{}
	ran := p.full
	clean := map[string]bool{} // the facilities that failed nothing
	for _, f := range d.facilities {
		if sf, ok := f.(sectioned); ok {
			section := sf.section(p) // at its turn: after what those before it wrote
			last, applied := d.applied[f.name()]
			if !ran && applied && reflect.DeepEqual(last, section) {
				skipped[f.name()] = true
				d.metrics.skipped.WithLabelValues(f.name()).Inc()
				continue
			}
			sections[f.name()], ran = section, true
		}
		start := time.Now()
		clean[f.name()] = true
		for o, err := range f.install(p) {
			failed[o] = errors.Join(failed[o], err)
			clean[f.name()] = false
		}
		d.metrics.phases.WithLabelValues(f.name()).Observe(time.Since(start).Seconds())
	}
	start := time.Now()
	for i := len(d.facilities) - 1; i >= 0; i-- {
		pr, ok := d.facilities[i].(pruner)
		if !ok || skipped[pr.name()] {
			continue
		}
		if err := pr.prune(p); err != nil {
			clean[pr.name()] = false
			if removals == nil {
				removals = map[string]error{}
			}
			removals[pr.name()] = err
			d.metrics.pruneFailures.WithLabelValues(pr.name()).Inc()
			d.log.Error("remove "+pr.removes(), "facility", pr.name(), "err", err)
		}
	}
	d.metrics.phases.WithLabelValues("removals").Observe(time.Since(start).Seconds())
	for name, section := range sections {
		if clean[name] {
			d.applied[name] = section
		} else { // run in full next time
			delete(d.applied, name)
		}
	}
	return failed, removals
}
