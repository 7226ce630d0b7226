package kernel

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane/routing"
	"github.com/egressd/egressd/dataplane/tc"
	"github.com/egressd/egressd/internal/nsthread"
)

// eventBuffer is each event socket's receive buffer (SO_RCVBUFFORCE, which CAP_NET_ADMIN
// allows): the kernel's default (net.core.rmem_default, about 200 KiB) can overrun when a burst
// of pods starts, and the events that did not fit are lost. Memory is taken only by what waits
// in it.
var eventBuffer = 2 << 20

// resubscribeEvery is the first pause between attempts to subscribe again that fail; it
// doubles up to a minute.
const resubscribeEvery = time.Second

// events is one subscription to the kernel's link, address, main-table route, neighbour and
// tc changes. It ends, all five together, when stop closes or when one receiver reports an
// error (report): the library ends a receiver on a receive error (a socket whose buffer
// overran lost the events that did not fit), but reports a message it cannot read and goes
// on without it. Either way a change may have gone untold, and what the events keep current
// (the interfaces facing pods, the node's interfaces) is looked up afresh.
type events struct {
	links  chan netlink.LinkUpdate
	addrs  chan netlink.AddrUpdate
	routes chan netlink.RouteUpdate
	neighs chan netlink.NeighUpdate
	// tcDeleted are the interfaces whose clsact qdisc, or a filter at egressd's priority, was
	// deleted.
	tcDeleted chan int
	stop      chan struct{}
	// drains empty the channels of the subscriptions made, so that their receivers, which may
	// be blocked sending, end once stop closed.
	drains []func()
	// listed are the interfaces' addresses, listed once subscribed: the address events
	// bring them up to date (linkAddrs).
	listed map[int][]netip.Addr
	// failure is the first error the library reported; lost closes then.
	failure  atomic.Pointer[error]
	lost     chan struct{}
	lostOnce sync.Once
}

// report records a receiver's error and ends the subscription (its first error is the cause;
// closing the others' sockets makes them report more).
func (e *events) report(err error) {
	e.failure.CompareAndSwap(nil, &err)
	e.lostOnce.Do(func() { close(e.lost) })
}

// subscribe subscribes in the calling thread's network namespace.
func subscribe() (*events, error) {
	e := &events{links: make(chan netlink.LinkUpdate, 64), addrs: make(chan netlink.AddrUpdate, 64),
		routes: make(chan netlink.RouteUpdate, 256), neighs: make(chan netlink.NeighUpdate, 64), tcDeleted: make(chan int, 64),
		stop: make(chan struct{}), lost: make(chan struct{})}
	onError := e.report
	for _, sub := range []struct {
		what      string
		subscribe func() error
		drain     func()
	}{
		{"link", func() error {
			return netlink.LinkSubscribeWithOptions(e.links, e.stop, netlink.LinkSubscribeOptions{
				ErrorCallback: onError, ReceiveBufferSize: eventBuffer, ReceiveBufferForceSize: true})
		}, func() { drain(e.links) }},
		{"address", func() error {
			return netlink.AddrSubscribeWithOptions(e.addrs, e.stop, netlink.AddrSubscribeOptions{
				ErrorCallback: onError, ReceiveBufferSize: eventBuffer, ReceiveBufferForceSize: true})
		}, func() { drain(e.addrs) }},
		{"route", func() error {
			return netlink.RouteSubscribeWithOptions(e.routes, e.stop, netlink.RouteSubscribeOptions{
				ErrorCallback: onError, ReceiveBufferSize: eventBuffer, ReceiveBufferForceSize: true})
		}, func() { drain(e.routes) }},
		{"neighbour", func() error {
			return netlink.NeighSubscribeWithOptions(e.neighs, e.stop, netlink.NeighSubscribeOptions{
				ErrorCallback: onError, ReceiveBufferSize: eventBuffer, ReceiveBufferForceSize: true})
		}, func() { drain(e.neighs) }},
		{"tc", func() error { return subscribeTC(e.tcDeleted, e.stop, onError) }, func() { drain(e.tcDeleted) }},
	} {
		if err := sub.subscribe(); err != nil {
			e.close()
			return nil, fmt.Errorf("subscribe to %s changes: %w", sub.what, err)
		}
		e.drains = append(e.drains, sub.drain)
	}
	// After the subscription: the events that follow bring the list up to date, also those
	// of changes made before it was taken (an address's last event is its state).
	all, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		e.close()
		return nil, fmt.Errorf("list the interfaces' addresses: %w", err)
	}
	e.listed = map[int][]netip.Addr{}
	for _, a := range all {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			e.listed[a.LinkIndex] = append(e.listed[a.LinkIndex], ip.Unmap())
		}
	}
	return e, nil
}

func (e *events) close() {
	close(e.stop)
	for _, d := range e.drains {
		go d()
	}
}

func (e *events) err() error {
	if err := e.failure.Load(); err != nil {
		return *err
	}
	return fmt.Errorf("a subscription ended")
}

// subscribeTC reports the interfaces whose clsact qdisc, or a filter at egressd's priority,
// was deleted (the library has no subscription of its own to tc changes).
func subscribeTC(ch chan<- int, stop <-chan struct{}, onError func(error)) error {
	s, err := nl.Subscribe(unix.NETLINK_ROUTE, unix.RTNLGRP_TC)
	if err != nil {
		return err
	}
	if err := s.SetReceiveBufferSize(eventBuffer, true); err != nil {
		s.Close()
		return err
	}
	go func() {
		<-stop
		s.Close()
	}()
	go func() {
		defer close(ch)
		for {
			msgs, from, err := s.Receive()
			if err != nil {
				onError(fmt.Errorf("receive tc changes: %w", err))
				return
			}
			if from.Pid != nl.PidKernel {
				continue
			}
			for _, m := range msgs {
				if idx, ok := tcDeletion(m); ok {
					ch <- idx
				}
			}
		}
	}()
	return nil
}

// tcDeletion returns the interface of a deleted clsact qdisc, or of a deleted filter at
// egressd's priority.
func tcDeletion(m syscall.NetlinkMessage) (int, bool) {
	if len(m.Data) < nl.SizeofTcMsg {
		return 0, false
	}
	msg := nl.DeserializeTcMsg(m.Data)
	switch m.Header.Type {
	case unix.RTM_DELQDISC:
		return int(msg.Ifindex), msg.Parent == netlink.HANDLE_CLSACT
	case unix.RTM_DELTFILTER: // Info: the filter's priority, then its protocol
		return int(msg.Ifindex), msg.Info>>16 == tc.Priority
	}
	return 0, false
}

func drain[T any](ch <-chan T) {
	for range ch {
	}
}

// kernelEvents watches the kernel's changes for the Applier: it keeps current the caches they
// invalidate (the interfaces facing pods, whether the node's addresses changed) and asks for a
// sync when a change matters to what egressd wrote.
type kernelEvents struct {
	facings   *facings
	addresses *addressFacility
	router    *routing.Router
	nft       *nftFacility
	attach    *attachFacility
	// podNetworks are the cluster networks of the last Apply: an address event inside them (a
	// pod's gateway on the host side of its interface, a Service address) changes neither
	// egressd's addresses nor the node's own.
	podNetworks atomic.Pointer[[]netip.Prefix]
	// named are the interfaces the last Apply's state names (namedInterfaces): a link event of
	// one is never only a pod's (podSide).
	named atomic.Pointer[map[string]bool]
	// podLinks are the interfaces whose last link event was a pod's (podSide): their deletion,
	// and the events of their routes to pod-side addresses (podRoute), are a pod's too. The
	// events' goroutine alone uses it.
	podLinks map[int]bool
	// linkAddrs are each interface's addresses, listed when subscribed and kept by the
	// address events (noteAddress): podSide reads them. Listing them at each link event cost
	// a dump of every address of the node, three per pod started: an eighth of the agent's
	// CPU on a node of 200 pods. The events' goroutine alone uses it.
	linkAddrs map[int][]netip.Addr
	// lost counts the subscriptions that failed (see watch).
	lost prometheus.Counter
	// watched: the events are subscribed to, and tell of each change (every Apply runs every
	// facility while they are not).
	watched atomic.Bool
	// ask asks for a sync for a change told, poke for one that need not run every facility
	// (a pod's interface), alarm for one at once (events lost).
	ask, poke, alarm func()
	done             <-chan struct{}
	// running is the Applier's, which Close waits for.
	running *sync.WaitGroup
	log     *slog.Logger
}

// watch applies the kernel's events until the applier closes. When a subscription ends before
// that (a receive error, such as a buffer that overran: events were lost), it subscribes again,
// and what the events keep current (the interfaces facing pods, whether the node's addresses
// changed) is looked up afresh, its caches unused meanwhile; a sync follows (it reads the
// gateways' neighbours anew). A link or a route missed is then as good as seen. The
// subscriptions are made again from this goroutine's thread, kept in the applier's namespace ns.
func (k *kernelEvents) watch(e *events, ns netns.NsHandle) {
	defer k.running.Done()
	err := nsthread.Lock(ns)
	ns.Close()
	if err != nil {
		k.log.Error("kernel events cannot be subscribed to again if they are lost", "err", err)
	}
	pause := resubscribeEvery
	for {
		k.linkAddrs = e.listed
		k.consume(e)
		e.close()
		k.podLinks, k.linkAddrs = nil, nil // what the lost events told of them is unknown
		select {
		case <-k.done:
			return
		default:
		}
		k.watched.Store(false)
		k.addresses.Watched(false)
		k.facings.watched(false)
		k.attach.recheckHooks(0) // a deletion of egressd's filters may be among the events lost
		k.lost.Inc()
		k.alarm()
		if err != nil {
			k.log.Error("kernel events lost: link, address and route changes are looked up at every sync from now on", "err", e.err())
			return
		}
		k.log.Warn("kernel events lost: subscribing to them again, and looking up afresh what they kept current", "err", e.err())
		for {
			var serr error
			if e, serr = subscribe(); serr == nil {
				break
			}
			k.log.Error("kernel events are not watched: link, address and route changes are looked up at every sync until they are", "err", serr, "retryIn", pause)
			select {
			case <-k.done:
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, time.Minute)
		}
		pause = resubscribeEvery
		// From the new subscription on, the events tell of each change again; what changed
		// before it was not told.
		k.facings.watched(true)
		k.addresses.Watched(true)
		k.watched.Store(true)
		k.attach.recheckHooks(0)
		k.alarm()
	}
}

// consume handles e's events until one of its receivers ends or reports an error, or the
// applier closes.
func (k *kernelEvents) consume(e *events) {
	for {
		select {
		case <-k.done:
			return
		case <-e.lost:
			return
		case u, ok := <-e.links:
			if !ok {
				return
			}
			k.facings.linkChanged(int(u.Index))
			if k.podSide(u) {
				k.poke()
				continue
			}
		case u, ok := <-e.addrs:
			if !ok {
				return
			}
			k.noteAddress(u)
			if k.uneventful(u) {
				continue
			}
			delete(k.podLinks, u.LinkIndex) // an address no pod's interface holds
			k.addresses.Changed()
		case u, ok := <-e.routes:
			if !ok {
				return
			}
			// Routes of the main table say which interface faces a pod address, those of an
			// egress IP's interface on a secondary network (in main or its VRF's table) are
			// copied into its table, and those to a gateway say which interface reaches it.
			faced := u.Table == unix.RT_TABLE_MAIN && k.facings.forgetRoute(u.Dst)
			// A pod's interface is read again at every sync, its routes too.
			switch {
			case k.copiedRoute(u.Route) || k.router.Resolves(u.Route):
			case !faced:
				continue
			case k.podRoute(u.Route):
				k.poke()
				continue
			}
		case u, ok := <-e.neighs:
			if !ok {
				return
			}
			if !k.nft.neighbourChanged(u) {
				continue
			}
		case idx, ok := <-e.tcDeleted:
			if !ok {
				return
			}
			k.attach.recheckHooks(idx) // asks for a sync itself, if any is needed
			continue
		}
		k.ask()
	}
}

// copiedRoute says whether a route (of any of its nexthops) is one that the routing copies
// into an egress IP's table.
func (k *kernelEvents) copiedRoute(rt netlink.Route) bool {
	if k.router.Copies(rt.LinkIndex, rt.Table) {
		return true
	}
	for _, nh := range rt.MultiPath {
		if k.router.Copies(nh.LinkIndex, rt.Table) {
			return true
		}
	}
	return false
}

// uneventful reports whether an address event needs no sync: an address on the pods' side of
// the node (podSideAddr), or egressd's own egress address added or its lifetime renewed (every
// third of it: on an egress node each renewal was a full sync). A deleted egress address is an
// event.
func (k *kernelEvents) uneventful(u netlink.AddrUpdate) bool {
	a, ok := netip.AddrFromSlice(u.LinkAddress.IP)
	if !ok {
		return false
	}
	a = a.Unmap()
	return k.podSideAddr(a) || u.NewAddr && k.addresses.Holds(a, u.LinkIndex)
}

func newEventsLost() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "egressd_kernel_events_lost_total",
		Help: "Times a subscription to the kernel's link, address, route, neighbour or tc changes ended on an error (events lost: a buffer overrun under a burst of changes, or a message it could not read); egressd subscribes again and looks up afresh what the events keep current.",
	})
}
