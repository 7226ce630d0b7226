package kernel

import (
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/tc"
)

// classifierFacility is the classifier's maps: pod entries, firewall and QoS tables, before
// the interfaces that run the program are attached (a newly attached interface finds its pod's
// entries at once).
type classifierFacility struct {
	classifier *classifier.Classifier
	facings    *facings
	log        *slog.Logger
}

func (*classifierFacility) name() string { return "classifier" }

func (f *classifierFacility) install(p *pass) map[dataplane.Origin]error {
	p.faced = f.face(p.state)
	return f.classifier.Apply(&p.state.Classifier, p.faced.indices(), p.faced.ports)
}

// attachFacility keeps the port guard on every port of a bridge of pods, then the classifier
// on every pod-facing interface; interfaces that no longer face a pod are detached last.
type attachFacility struct {
	// attachers: the classifier at ingress, its companion (replies the kfuncs cannot track:
	// ICMP echo, SCTP) at egress of the same interfaces (dataplane/tc).
	attachers  []*tc.Attacher
	portGuard  *tc.Attacher // ingress of the ports of bridges of pods (guard.go)
	classifier *classifier.Classifier
	// podsInForce, when set, hears of new pods as soon as their interfaces are attached.
	podsInForce dataplane.PodsInForce
	// recheck are the interfaces whose hooks the next attach looks at again (recheckHooks).
	recheck map[int]bool
	// kept are the interfaces the last attach meant to keep attached (whether it could or not):
	// a tc deletion elsewhere is egressd's own detaching, or went with its interface.
	kept map[int]bool
	// recheckAsked and recheckDue pace the syncs tc deletions ask for (recheckHooks).
	recheckAsked time.Time
	recheckDue   bool
	recheckMu    sync.Mutex
	// unguardedSaid: why each unguarded interface is so, as last said. Apply's goroutine only.
	unguardedSaid map[string]string
	// cni looks at the programs after the classifier where it is attached.
	cni        *cniWatch
	reattached prometheus.Counter
	ask        func()
	log        *slog.Logger
}

func (*attachFacility) name() string { return "attach" }

func (f *attachFacility) install(p *pass) map[dataplane.Origin]error {
	return f.attach(p.state, p.faced, p.failed)
}

// close releases the attachers' file descriptors; what is attached stays.
func (f *attachFacility) close() {
	for _, at := range append(f.attachers, f.portGuard) {
		at.Close()
	}
}

// faced is where the packets of each local pod address come in: the interface facing it, and
// for a bridged pod the bridge port.
type faced struct {
	byAddr map[netip.Addr]facing
	ports  map[netip.Addr]int
	failed map[dataplane.Origin]error
	links  *linkSet // nil: not listed (no pods, or the list failed)
}

// face finds the interface facing every pod address of s, and the bridge ports; a pod whose
// address faces none fails.
func (c *classifierFacility) face(s *dataplane.State) faced {
	n := len(s.Classifier.Pods)
	f := faced{byAddr: make(map[netip.Addr]facing, n), ports: map[netip.Addr]int{}, failed: map[dataplane.Origin]error{}}
	ips := make(map[netip.Addr]bool, n)
	for _, p := range s.Classifier.Pods {
		for _, ip := range p.IPs {
			ips[ip] = true
			name, idx, err := c.facings.of(ip, p.HostInterfaces)
			if err != nil {
				f.failed[p.Origin] = err
				continue
			}
			f.byAddr[ip] = facing{name, idx}
		}
	}
	c.facings.keepOnly(ips)
	if len(f.byAddr) > 0 {
		var err error
		if f.links, err = c.facings.links(); err != nil {
			c.log.Error("list interfaces to find the bridge ports and the interfaces facing pods alone; sources are checked as before this sync", "err", err)
		}
		c.ports(s, &f)
	}
	return f
}

// indices are the interface indices of f's addresses, for the classifier's pod entries.
func (f faced) indices() map[netip.Addr]int {
	out := make(map[netip.Addr]int, len(f.byAddr))
	for ip, fc := range f.byAddr {
		out[ip] = fc.index
	}
	return out
}

// attach keeps the classifier on exactly the interfaces facing the pods; a failure is the
// failure of every pod behind that interface. The interfaces are attached one by one, both
// hooks, in the pods' order: once all of a pod's interfaces are attached and one of them was
// new, the pod is in force (the phases before wrote everything else it needs), and
// podsInForce hears of it then, with before, their failures. Under a burst of new pods each
// new interface waits for the RTNL lock that the CNI plugins setting up other pods hold; a
// pod's ADD need not wait for all of them.
func (a *attachFacility) attach(s *dataplane.State, f faced, before map[dataplane.Origin]error) map[dataplane.Origin]error {
	type owner struct {
		iface  string
		origin dataplane.Origin
	}
	// Sized for a pod per interface: growing them was most of what a sync allocated.
	n := len(s.Classifier.Pods)
	failed := maps.Clone(f.failed)
	want := make(map[string]int, n)
	order := make([]string, 0, n)
	owners := make(map[string][]dataplane.Origin, n)
	seen := make(map[owner]bool, n)
	left := make(map[dataplane.Origin]int, n) // interfaces of each pod not attached yet
	for _, p := range s.Classifier.Pods {
		for _, ip := range p.IPs {
			fc, ok := f.byAddr[ip]
			if !ok {
				continue // failed
			}
			name := fc.name
			if _, ok := want[name]; !ok {
				order = append(order, name)
			}
			want[name] = fc.index
			if o := (owner{name, p.Origin}); !seen[o] {
				seen[o] = true
				owners[name] = append(owners[name], p.Origin)
				left[p.Origin]++
			}
		}
	}
	g := a.guardsFor(s, f, want)
	a.recheckMu.Lock()
	// Before Detach: the deletions it makes are no news (recheckHooks).
	clear(a.kept)
	for _, idx := range want {
		a.kept[idx] = true
	}
	if g != nil {
		for _, idx := range g.ports {
			a.kept[idx] = true
		}
	}
	for idx := range a.recheck {
		for _, at := range append(a.attachers, a.portGuard) {
			at.Recheck(idx)
		}
	}
	clear(a.recheck)
	a.recheckMu.Unlock()
	for o, err := range a.guard(g) {
		failed[o] = errors.Join(failed[o], err)
	}
	for _, at := range a.attachers {
		for ifname, err := range at.Detach(want) {
			for _, o := range owners[ifname] {
				failed[o] = errors.Join(failed[o], err)
			}
			if len(owners[ifname]) == 0 { // no pod to blame, log it
				a.log.Error("detach classifier", "interface", ifname, "err", err)
			}
		}
	}
	podInterfaces(a.cni, want)
	fresh := make(map[dataplane.Origin]bool, n)
	for _, name := range order {
		isNew, again, errs, q := false, false, error(nil), &tc.Qdisc{}
		for _, at := range a.attachers {
			outcome, err := at.Attach(name, want[name], q)
			isNew, again, errs = isNew || outcome == tc.Fresh, again || outcome == tc.Again, errors.Join(errs, err)
			if outcome == tc.Again {
				a.reattached.Inc()
			}
		}
		if again {
			a.log.Warn("egressd's classifier was deleted from a pod's interface behind its back; attached again", "interface", name, "pods", owners[name])
		}
		var ready []dataplane.Origin
		for _, o := range owners[name] {
			if errs != nil {
				failed[o] = errors.Join(failed[o], errs)
				continue
			}
			fresh[o] = fresh[o] || isNew
			left[o]--
			if left[o] == 0 && fresh[o] && failed[o] == nil {
				ready = append(ready, o)
			}
		}
		if len(ready) > 0 && a.podsInForce != nil {
			a.podsInForce(s, ready, before)
		}
		// After the pods hear they are in force: what runs after the classifier there is
		// reported (Result.Conflicts), it does not hold their programming back.
		if isNew || again {
			a.cni.attached(name)
		}
	}
	return failed
}

// recheckHooks makes the next attach look again at the hooks of the interface of index idx (0:
// of every interface) and asks for a sync: its clsact qdisc, or a filter of egressd's, was
// deleted behind egressd's back (tc events), and its filters are attached again at once instead
// of at the next look a minute on. Interfaces egressd does not keep are left alone. (Moving a
// filter to a tcx link, egressd deletes one of its own on an interface it keeps: one sync
// more.) Against a tool that keeps deleting them, these syncs come at most once per
// recheckGap.
func (a *attachFacility) recheckHooks(idx int) {
	a.recheckMu.Lock()
	defer a.recheckMu.Unlock()
	if idx != 0 && !a.kept[idx] {
		return
	}
	a.recheck[idx] = true
	if a.recheckDue {
		return // a sync is asked for already
	}
	wait := recheckGap - time.Since(a.recheckAsked)
	if wait <= 0 {
		a.recheckAsked = time.Now()
		a.ask()
		return
	}
	a.recheckDue = true
	time.AfterFunc(wait, func() {
		a.recheckMu.Lock()
		a.recheckDue, a.recheckAsked = false, time.Now()
		a.recheckMu.Unlock()
		a.ask()
	})
}

// recheckGap is the least time between two syncs asked for by tc deletions.
const recheckGap = time.Second

func newReattached() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "egressd_classifier_reattached_total",
		Help: "Hooks of pod interfaces (ingress, egress) whose egressd filter was found deleted behind egressd's back (its clsact qdisc deleted by hand or by another agent) and attached again. A steady rise: something on the node keeps removing it.",
	})
}
