// Package kernel is the composite Applier that programs the node's kernel: one facility per
// kernel facility (facility.go: install its section of the state, prune what it owns and the
// state no longer wants), run in phases so that nothing is selected before what it selects
// exists.
//
// Phases, in order (each installs what the state wants; what it no longer wants is removed by
// the same facility, after its installs):
//
//  1. nftables: leak guards, SNAT and after-DNAT drops, before any route or mark that sends
//     traffic through them (one transaction: its removals are atomic with its adds);
//  2. addresses: the egress IPs this node hosts, announced when added;
//  3. BFD sessions to the gateways whose liveness gates nexthops (a session state change
//     triggers a sync, so a gateway Down leaves its group at once);
//  4. tunnel: egressd's VXLAN device and its entries per egress node, before the routes
//     through it;
//  5. routing: the tables of the steered paths (groups of the live gateways), then the rules
//     that select them by mark;
//  6. classifier maps: pod entries, firewall and QoS tables, before the interfaces that run the
//     program are attached (a newly attached interface finds its pod's entries at once);
//  7. attachment: the port guard on every port of a bridge of pods, then the classifier on
//     every pod-facing interface; interfaces that no longer face a pod are detached last;
//  8. removals of what the state no longer wants, in reverse: rules, routes and nexthops,
//     then the tunnel's entries (or the device), then egress addresses assigned elsewhere now.
//     What fails to be removed is in the result (Result.Removals), for the caller to retry.
package kernel

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/addresses"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/nft"
	"github.com/egressd/egressd/dataplane/routing"
	"github.com/egressd/egressd/dataplane/rpfilter"
	"github.com/egressd/egressd/dataplane/tc"
	"github.com/egressd/egressd/dataplane/tunnel"
	"github.com/egressd/egressd/internal/nsthread"
)

// Options of the kernel facilities.
type Options struct {
	// PinRoot is the bpffs directory of the classifier's maps, program and links.
	PinRoot    string
	Classifier classifier.Options
	Routing    routing.Config
	Tunnel     tunnel.Config
	// AddressLifetime is how long an egress address outlives an agent that stopped renewing
	// it (0: forever).
	AddressLifetime time.Duration
	// PodsInForce, when set, hears of new pods as soon as their interfaces are attached.
	PodsInForce dataplane.PodsInForce
	// RPFilterState is the file in which the agent remembers the reverse path filters it
	// loosened (rpfilter.Loosener); LoosenRPFilter false leaves them strict (reported only), and
	// puts back what an earlier agent loosened.
	RPFilterState  string
	LoosenRPFilter bool
	// CiliumNodeConfig is the node configuration header Cilium's agent builds its programs
	// with (tc.CompiledConflicts); "" looks for none.
	CiliumNodeConfig string
	// FullPass is how often an Apply runs every facility, also those whose part of the state
	// did not change (sectioned), to repair what changed in the kernel unseen (0: 5 minutes).
	FullPass time.Duration
}

// defaultFullPass is Options.FullPass's default, the sync loop's default resync period.
const defaultFullPass = 5 * time.Minute

// Applier programs the kernel of the network namespace the process runs in: it runs its
// facilities in order (run), and the components that keep it current between syncs: the
// kernel's events (kernelEvents), the periodic checks (every), the ACL logs (serveACLLogs).
type Applier struct {
	// facilities install in this order and prune in reverse (run).
	facilities []facility
	// The facilities the events, the periodic work, the metrics and Close reach.
	classifier *classifier.Classifier
	facings    *facings
	nft        *nftFacility
	addresses  *addressFacility
	bfd        *bfdFacility
	tunnel     tunnelFacility
	routing    *routingFacility
	attach     *attachFacility
	events     *kernelEvents
	// snooped are the namespaces of the pods whose DNS answers the last Apply queued, by
	// address: the answer reader counts what they teach against them (SnoopedNamespace).
	snooped atomic.Pointer[map[netip.Addr]string]
	// news: the kernel changed, or was found changed, since the last Apply began, or a full
	// pass is due (signal, FullPass): the next Apply runs every facility. applied are the
	// sections the sectioned facilities last applied without a failure (Apply's goroutine).
	news    atomic.Bool
	applied map[string]any
	// poked: a pod's interface or route changed since the last Apply began (poke), which the
	// classifier and attach read. last is the last Apply that ran (repeat).
	poked   atomic.Bool
	last    lastApply
	changed chan struct{}
	urgent  chan struct{}
	done    chan struct{}
	// running are the goroutines that watch the kernel and do the periodic work.
	running sync.WaitGroup
	metrics *metrics
	cni     *cniWatch
	log     *slog.Logger
}

// New adopts what a previous agent left under pinRoot (so that enforcement continues without a
// gap) and starts watching link, address and (external gateways') neighbour changes.
func New(o Options, log *slog.Logger) (*Applier, error) {
	// undo releases, in reverse, what was opened before a step failed.
	var undo []func()
	fail := func(err error) (*Applier, error) {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		return nil, err
	}
	var loosener *rpfilter.Loosener
	switch {
	case o.RPFilterState == "":
	case o.LoosenRPFilter:
		var err error
		if loosener, err = rpfilter.OpenLoosener(o.RPFilterState); err != nil {
			log.Error("read the reverse path filters an earlier agent loosened", "err", err)
		}
	default:
		if err := rpfilter.Restore(o.RPFilterState); err != nil {
			log.Error("put back the reverse path filters an earlier agent loosened", "err", err)
		}
	}
	c, err := classifier.Load(o.PinRoot, o.Classifier)
	if err != nil {
		return nil, err
	}
	undo = append(undo, c.Close)
	// The companion first: by the time the classifier judges a pod's reply, the request that
	// it answers has been seen.
	toPod, err := tc.New(o.PinRoot, tc.Egress, c.ToPod)
	if err != nil {
		return fail(err)
	}
	undo = append(undo, toPod.Close)
	a, err := tc.New(o.PinRoot, tc.Ingress, c.Program)
	if err != nil {
		return fail(err)
	}
	undo = append(undo, a.Close)
	ports, err := tc.New(o.PinRoot, tc.Port, c.FromPort)
	if err != nil {
		return fail(err)
	}
	undo = append(undo, ports.Close)
	t, err := nft.New()
	if err != nil {
		return fail(err)
	}
	undo = append(undo, func() { _ = t.Close() })
	owned, err := addresses.New(addresses.DefaultProtocol, o.AddressLifetime)
	if err != nil {
		return fail(err)
	}
	router, err := routing.New(o.Routing)
	if err != nil {
		return fail(err)
	}
	if changed, err := routing.EnsureFlowHash(); err != nil {
		log.Error("multipath routes will spread by address only, not per flow", "err", err)
	} else if len(changed) > 0 {
		log.Info("multipath routes spread per flow (5-tuple hash)", "sysctls", changed)
	}
	undo = append(undo, router.Close)
	tun, err := tunnel.New(o.Tunnel)
	if err != nil {
		return fail(err)
	}
	undo = append(undo, tun.Close)
	facings, err := newFacings()
	if err != nil {
		return fail(err)
	}
	d := &Applier{classifier: c, facings: facings, applied: map[string]any{}, changed: make(chan struct{}, 1), urgent: make(chan struct{}, 1), done: make(chan struct{}), metrics: newMetrics(),
		cni: newCNIWatch(o.CiliumNodeConfig, facings.h, log), log: log}
	d.nft = &nftFacility{table: t, tableLost: d.metrics.tableLost, ask: d.alarm, log: log}
	d.addresses = &addressFacility{Addresses: owned, log: log}
	d.bfd = &bfdFacility{done: d.done, ask: d.alarm, log: log}
	d.tunnel = tunnelFacility{tun}
	d.routing = &routingFacility{router: router, loosener: loosener, strictRPFilter: d.metrics.strictRPFilter, ipv6RPCheck: d.metrics.ipv6RPCheck, log: log}
	d.attach = &attachFacility{attachers: []*tc.Attacher{toPod, a}, portGuard: ports, classifier: c, podsInForce: o.PodsInForce,
		recheck: map[int]bool{}, kept: map[int]bool{}, unguardedSaid: map[string]string{}, cni: d.cni, reattached: d.metrics.reattached, ask: d.alarm, log: log}
	d.facilities = []facility{d.nft, d.addresses, d.bfd, d.tunnel, d.routing, &classifierFacility{classifier: c, facings: facings, log: log}, d.attach}
	d.events = &kernelEvents{facings: facings, addresses: d.addresses, router: router, nft: d.nft, attach: d.attach,
		lost: d.metrics.eventsLost, ask: d.signal, poke: d.poke, alarm: d.alarm, done: d.done, running: &d.running, log: log}
	d.bfd.inherit(router.InUse())
	serveACLLogs(c, t, o.Classifier, d.done, log)
	// The namespace the events are watched in, for the subscriptions made again.
	ns, err := netns.Get()
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("the agent's network namespace: %w", err)
	}
	e, err := subscribe()
	if err != nil {
		ns.Close()
		d.Close()
		return nil, err
	}
	// The caches are trusted from here on: the events tell of each change.
	facings.watched(true)
	owned.Watched(true)
	d.events.watched.Store(true)
	d.running.Add(1)
	go d.events.watch(e, ns)
	if o.AddressLifetime > 0 {
		if err := d.every(renewalEvery(o.AddressLifetime), d.addresses.renew); err != nil {
			d.Close()
			return nil, err
		}
	}
	if o.FullPass <= 0 {
		o.FullPass = defaultFullPass
	}
	if err := d.every(o.FullPass, d.signal); err != nil {
		d.Close()
		return nil, err
	}
	if err := d.every(tableCheck, d.nft.checkTable); err != nil {
		d.Close()
		return nil, err
	}
	if err := d.every(cniLook, func() {
		if d.cni.look() {
			d.signal()
		}
	}); err != nil {
		d.Close()
		return nil, err
	}
	log.Info("dataplane ready", "adoptedInterfaces", a.Attached(), "adoptedReplyInterfaces", toPod.Attached())
	return d, nil
}

// Changed receives a value after the kernel changed under egressd (links added, removed,
// renamed; the node's addresses, not those on the pods' side; the routes to pods, those of
// the interfaces of egress IPs on secondary networks (copied into their tables) and those to
// gateways (which decide their interface); gateways' neighbours; egressd's filters deleted
// behind its back), its view of those changes was lost and taken again, a BFD session changed
// state, or a full pass is due (Options.FullPass): the desired state must be applied again,
// by every facility, except after a pod's interface or its routes changed, which only the
// classifier and attach read (podSide). A sync for it may wait a little (the sync loop paces a
// burst of them: a new pod's veth comes with three link events), unless Urgent says otherwise.
func (d *Applier) Changed() <-chan struct{} { return d.changed }

// Urgent receives a value, after Changed does, for the changes whose sync should not wait: a
// BFD session changed state (a gateway Down leaves its groups at once), egressd's nftables
// table or tc filters were deleted behind its back (the pods' traffic is unguarded until they
// are back), or its view of the kernel's changes was lost.
func (d *Applier) Urgent() <-chan struct{} { return d.urgent }

// SnoopedNamespace is the namespace of the pod at addr whose DNS answers are queued ("" for
// none: an answer queued by an earlier agent's rules).
func (d *Applier) SnoopedNamespace(addr netip.Addr) string {
	if m := d.snooped.Load(); m != nil {
		return (*m)[addr.Unmap()]
	}
	return ""
}

// Apply makes the kernel match s, facility by facility (see the package comment).
func (d *Applier) Apply(_ context.Context, s *dataplane.State) dataplane.Result {
	nets := slices.Clone(s.Classifier.ClusterNetworks)
	d.events.podNetworks.Store(&nets)
	named := namedInterfaces(s)
	d.events.named.Store(&named)
	snooped := make(map[netip.Addr]string, len(s.Nftables.DNSSnoop.Pods))
	for _, p := range s.Nftables.DNSSnoop.Pods {
		snooped[p.IP.Unmap()] = p.Namespace
	}
	d.snooped.Store(&snooped) // before the rules that queue their answers
	// Before the BFD sessions are read: a change from here on makes the next Apply full. While
	// the kernel's events are not watched, every Apply is.
	full := d.news.Swap(false) || !d.events.watched.Load()
	if res, ok := d.repeat(s, full, d.poked.Swap(false)); ok {
		return res
	}
	began := time.Now()
	var res dataplane.Result
	res.Failed, res.Removals = d.run(&pass{state: s, up: d.bfd.up(), full: full})
	res.HostCIDRs = d.addresses.hostCIDRs(s.Classifier.ClusterNetworks)
	res.Conflicts = map[dataplane.Conflict]int{}
	for c, n := range d.cni.podCounts() {
		res.Conflicts[dataplane.Conflict{Program: c.Program, Setting: c.Setting, Effect: c.Effect(), Of: "pod interfaces"}] = n
	}
	wildcards, compiled := d.cni.conflicts(s)
	if wildcards > 0 {
		c := tc.ServiceWildcard
		res.Conflicts[dataplane.Conflict{Program: c.Program, Setting: c.Setting, Effect: c.Effect(), Of: "source NAT addresses"}] = wildcards
	}
	for _, c := range compiled {
		res.Conflicts[dataplane.Conflict{Program: c.Program, Setting: c.Setting, Effect: c.Effect(), Of: "node (its node_config.h)"}] = 1
	}
	d.metrics.conflicts.Reset()
	for c, n := range res.Conflicts {
		d.metrics.conflicts.WithLabelValues(c.Program, c.Setting).Set(float64(n))
	}
	d.ran(s, res, began)
	return res
}

// signal asks for a sync (Changed) that runs every facility, without waiting: one pending
// request covers any number.
func (d *Applier) signal() {
	d.news.Store(true)
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// poke asks for a sync that need not run every facility (the classifier and attach run at
// every sync).
func (d *Applier) poke() {
	d.poked.Store(true)
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// alarm is signal, and asks for the sync at once (Urgent): after Changed, so that a sync the
// urgent request starts covers the signal too.
func (d *Applier) alarm() {
	d.signal()
	select {
	case d.urgent <- struct{}{}:
	default:
	}
}

// Close stops watching and releases file descriptors; what is programmed stays.
func (d *Applier) Close() {
	close(d.done)
	d.running.Wait()
	d.attach.close()
	d.classifier.Close()
	d.facings.close()
	d.routing.router.Close()
	d.tunnel.Close()
	d.bfd.close()
	if err := d.nft.table.Close(); err != nil {
		d.log.Error("close the nftables connection", "err", err)
	}
}

// tableCheck is how often egressd's nftables table is looked at (checkTable).
var tableCheck = 5 * time.Second

// every runs f every interval until the applier closes, from a thread kept in the network
// namespace of New's caller, where the kernel objects f looks at are; Close waits for it.
func (d *Applier) every(interval time.Duration, f func()) error {
	ns, err := netns.Get()
	if err != nil {
		return fmt.Errorf("the agent's network namespace: %w", err)
	}
	d.running.Add(1)
	go func() {
		defer d.running.Done()
		err := nsthread.Lock(ns)
		ns.Close()
		if err != nil {
			d.log.Error("periodic work cannot run in the agent's network namespace", "err", err)
			return
		}
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-d.done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return nil
}
