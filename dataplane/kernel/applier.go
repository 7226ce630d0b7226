// Package kernel is the composite Applier that programs the node's kernel: one part per kernel
// facility, run in phases so that nothing is selected before what it selects exists.
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
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/addresses"
	"github.com/egressd/egressd/dataplane/bfd"
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
}

// Applier programs the kernel of the network namespace the process runs in.
type Applier struct {
	classifier *classifier.Classifier
	// attachers: the classifier at ingress, its companion (replies the kfuncs cannot track:
	// ICMP echo, SCTP) at egress of the same interfaces (dataplane/tc).
	attachers []*tc.Attacher
	portGuard *tc.Attacher // ingress of the ports of bridges of pods (guard.go)
	facings   *facings
	addresses *addresses.Addresses
	routing   *routing.Router
	tunnel    *tunnel.Tunnel
	// bfd runs the sessions, started with the first peer: its UDP port (3784) stays free for
	// a node's own BFD daemon until egressd needs it.
	bfd   *bfd.Manager
	bfdMu sync.Mutex // metrics scrapes read bfd while Apply may start it
	nft   *nft.Table
	// gatewayMACs are the return paths' gateways with the MAC last given to nftables ("" for
	// none): a neighbour update that changes one triggers a sync.
	gatewayMACs map[netip.Addr]string
	neighMu     sync.Mutex
	changed     chan struct{}
	done        chan struct{}
	// inherited are the gateways the previous agent's routes used (routing.Router.InUse), taken
	// as alive until their own BFD session comes up or inheritUntil: a restarted agent's
	// sessions start Down, and judging by them alone would take every BFD-gated gateway out of
	// use, and flush the connections it brought, at every restart. Apply's goroutine only.
	inherited    map[netip.Addr]bool
	inheritUntil time.Time
	// snooped are the namespaces of the pods whose DNS answers the last Apply queued, by
	// address: the answer reader counts what they teach against them (SnoopedNamespace).
	snooped atomic.Pointer[map[netip.Addr]string]
	// podNetworks are the cluster networks of the last Apply: an address event inside them (a
	// pod's gateway on the host side of its interface, a Service address) changes neither
	// egressd's addresses nor the node's own.
	podNetworks atomic.Pointer[[]netip.Prefix]
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
	// watching are the goroutines that watch the kernel (watch, every).
	watching sync.WaitGroup
	// eventsLost counts the event subscriptions that failed (see watch).
	eventsLost prometheus.Counter
	// tableLost counts the times egressd's nftables table was found not whole (checkTable).
	tableLost  prometheus.Counter
	reattached prometheus.Counter // hooks found deleted behind egressd's back, attached again
	// loosener loosens the reverse path filter of the interfaces replies come in through (nil:
	// it is left strict, and reported). Apply's goroutine only.
	loosener *rpfilter.Loosener
	// strictWarned are the interfaces reversePath last warned of. Apply's goroutine only.
	strictWarned []string
	// unguardedSaid: why each unguarded interface is so, as last said. Apply's goroutine only.
	unguardedSaid map[string]string
	// strictRPFilter exports them.
	strictRPFilter *prometheus.GaugeVec
	// checks6 are the IPv6 reverse path checks reversePath6 last found dropping egressd's
	// traffic, read at checks6Read while egressd routed through checks6Paths; checks6Warned
	// those it has warned of; ipv6RPCheck exports them. Apply's goroutine only.
	checks6       []rpfilter.Check6
	checks6Read   time.Time
	checks6Paths  string
	checks6Warned map[string]bool
	ipv6RPCheck   *prometheus.GaugeVec
	// phases times each phase of Apply: where a slow sync spends its time.
	phases *prometheus.HistogramVec
	// removals remove what the state no longer wants, in order (removals.go); pruneFailures
	// counts their failures.
	removals      []removal
	pruneFailures *prometheus.CounterVec
	log           *slog.Logger
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
	d := &Applier{classifier: c, attachers: []*tc.Attacher{toPod, a}, portGuard: ports, facings: facings, nft: t, addresses: owned, routing: router,
		tunnel: tun, changed: make(chan struct{}, 1), done: make(chan struct{}), log: log,
		podsInForce: o.PodsInForce, phases: newPhases(), eventsLost: newEventsLost(), reattached: newReattached(), tableLost: newTableLost(),
		loosener: loosener, strictRPFilter: newStrictRPFilter(), ipv6RPCheck: newIPv6RPCheck(), recheck: map[int]bool{}, kept: map[int]bool{}, unguardedSaid: map[string]string{},
		pruneFailures: newPruneFailures()}
	d.removals = d.facilityRemovals()
	if inUse := router.InUse(); len(inUse) > 0 {
		d.inherited, d.inheritUntil = map[netip.Addr]bool{}, time.Now().Add(inheritGrace)
		for _, gw := range inUse {
			d.inherited[gw] = true
		}
		// Judged by the sessions alone from then on.
		time.AfterFunc(inheritGrace, d.signal)
	}
	go func() {
		if err := c.ServeACLLog(log); err != nil {
			log.Error("ACL logging stopped", "err", err)
		}
	}()
	aclLog := o.Classifier.ACLLog
	if aclLog == nil {
		aclLog = dataplane.StderrACLLog
	}
	go t.ServeACLLog(aclLog, o.Classifier.ACLLogRate, time.Second, d.done) // drops after DNAT
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
	d.facings.watched(true)
	owned.Watched(true)
	d.watching.Add(1)
	go d.watch(e, ns)
	if o.AddressLifetime > 0 {
		if err := d.every(min(o.AddressLifetime/3, maxRenewal), d.renewAddresses); err != nil {
			d.Close()
			return nil, err
		}
	}
	if err := d.every(tableCheck, d.checkTable); err != nil {
		d.Close()
		return nil, err
	}
	log.Info("dataplane ready", "adoptedInterfaces", a.Attached(), "adoptedReplyInterfaces", toPod.Attached())
	return d, nil
}

// Changed receives a value after the kernel changed under egressd (links added, removed,
// renamed; the node's addresses, not those on the pods' side; the routes to pods, those of
// the interfaces of egress IPs on secondary networks (copied into their tables) and those to
// gateways (which decide their interface); gateways' neighbours; egressd's filters deleted behind its back), its view of those changes was lost
// and taken again, or a BFD session changed state: the desired state must be applied again.
func (d *Applier) Changed() <-chan struct{} { return d.changed }

// SnoopedNamespace is the namespace of the pod at addr whose DNS answers are queued ("" for
// none: an answer queued by an earlier agent's rules).
func (d *Applier) SnoopedNamespace(addr netip.Addr) string {
	if m := d.snooped.Load(); m != nil {
		return (*m)[addr.Unmap()]
	}
	return ""
}

// Apply makes the kernel match s, phase by phase (see the package comment).
func (d *Applier) Apply(_ context.Context, s *dataplane.State) dataplane.Result {
	res := dataplane.Result{Failed: map[dataplane.Origin]error{}}
	fail := func(failed map[dataplane.Origin]error) {
		for o, err := range failed {
			res.Failed[o] = errors.Join(res.Failed[o], err)
		}
	}
	up := d.bfdUp()
	nets := slices.Clone(s.Classifier.ClusterNetworks)
	d.podNetworks.Store(&nets)
	snooped := make(map[netip.Addr]string, len(s.Nftables.DNSSnoop.Pods))
	for _, p := range s.Nftables.DNSSnoop.Pods {
		snooped[p.IP.Unmap()] = p.Namespace
	}
	d.snooped.Store(&snooped) // before the rules that queue their answers
	phase := func(name string, f func() map[dataplane.Origin]error) {
		start := time.Now()
		fail(f())
		d.phases.WithLabelValues(name).Observe(time.Since(start).Seconds())
	}
	phase("nftables", func() map[dataplane.Origin]error {
		nftState := s.Nftables
		nftState.ReturnPaths = d.returnPaths(s.Nftables.ReturnPaths, up)
		return d.nft.Apply(&nftState)
	})
	phase("addresses", func() map[dataplane.Origin]error { return d.addresses.Apply(s.Addresses) })
	phase("bfd", func() map[dataplane.Origin]error { return d.syncBFD(s.BFD) })
	phase("tunnel", func() map[dataplane.Origin]error { return d.tunnel.Apply(&s.Tunnel) })
	// The tables of egress IPs on secondary networks copy their interface's routes as they are
	// now: after the addresses phase placed the IPs.
	var routes *dataplane.RoutingState
	phase("routing", func() map[dataplane.Origin]error {
		routes = d.routing.WithLinkRoutes(&s.Routing)
		defer d.reversePath6(tunnel6(&s.Tunnel))
		defer d.reversePath(s.Routing.SteeredFrom, s.Routing.SteeredPods)
		return d.routing.Apply(routes, up)
	})
	var f faced
	phase("classifier", func() map[dataplane.Origin]error {
		f = d.face(s)
		return d.classifier.Apply(&s.Classifier, f.indices(), f.ports)
	})
	phase("attach", func() map[dataplane.Origin]error { return d.attach(s, f, res.Failed) })
	phase("removals", func() map[dataplane.Origin]error {
		res.Removals = d.prune(s, routes)
		return nil
	})
	// The node's addresses as last listed: Prune lists them again when they changed.
	res.HostCIDRs = hostCIDRs(s.Classifier.ClusterNetworks, d.addresses.Others())
	return res
}

// uneventful reports whether an address event needs no sync: an address on the pods' side of
// the node: link-local, or in the cluster networks, pods' and services' (a routed CNI gives each
// pod's host interface a gateway address; kube-proxy's IPVS mode puts Service addresses on
// kube-ipvs0), none of which is ever an egress address nor published as the node's
// (hostCIDRs); or egressd's own egress address added or its lifetime renewed (every third of
// it: on an egress node each renewal was a full sync). A deleted egress address is an event.
func (d *Applier) uneventful(u netlink.AddrUpdate) bool {
	a, ok := netip.AddrFromSlice(u.LinkAddress.IP)
	if !ok {
		return false
	}
	a = a.Unmap()
	if a.IsLinkLocalUnicast() {
		return true
	}
	if u.NewAddr && d.addresses.Holds(a, u.LinkIndex) {
		return true
	}
	nets := d.podNetworks.Load()
	return nets != nil && slices.ContainsFunc(*nets, func(p netip.Prefix) bool { return p.Contains(a) })
}

// Close stops watching and releases file descriptors; what is programmed stays.
func (d *Applier) Close() {
	close(d.done)
	d.watching.Wait()
	for _, at := range append(d.attachers, d.portGuard) {
		at.Close()
	}
	d.classifier.Close()
	d.facings.close()
	d.routing.Close()
	d.tunnel.Close()
	if m := d.bfdManager(); m != nil {
		m.Close()
	}
	if err := d.nft.Close(); err != nil {
		d.log.Error("close the nftables connection", "err", err)
	}
}

// tableCheck is how often egressd's nftables table is looked at (checkTable).
var tableCheck = 5 * time.Second

// checkTable asks for a sync, which writes egressd's nftables table again, when it is not
// whole: a `nft flush ruleset` or `nft delete table` elsewhere takes egressd's SNAT and leak
// guards with it. Polled, not watched: a listener of nftables' events makes the kernel report
// every element egressd writes.
func (d *Applier) checkTable() {
	if !d.nft.Intact() {
		d.tableLost.Inc()
		d.log.Warn("egressd's nftables table was deleted or changed behind its back; writing it again", "table", "inet "+nft.TableName)
		d.signal()
	}
}

// maxRenewal bounds the time between renewals of the egress addresses' lifetime: an address
// of a dead agent goes between lifetime - maxRenewal and lifetime after its death, a window
// the default lifetime places just after the leader's move (see cmd/egressd's flag).
const maxRenewal = 5 * time.Second

// renewAddresses keeps the egress addresses alive while the agent runs: at least three
// renewals per lifetime, so a missed one or two do not drop them.
func (d *Applier) renewAddresses() {
	if err := d.addresses.Renew(); err != nil {
		d.log.Error("renew the lifetime of egress addresses", "err", err)
	}
}

// every runs f every interval until the applier closes, from a thread kept in the network
// namespace of New's caller, where the kernel objects f looks at are; Close waits for it.
func (d *Applier) every(interval time.Duration, f func()) error {
	ns, err := netns.Get()
	if err != nil {
		return fmt.Errorf("the agent's network namespace: %w", err)
	}
	d.watching.Add(1)
	go func() {
		defer d.watching.Done()
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
