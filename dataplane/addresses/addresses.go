// Package addresses hosts the egress addresses of this node: each is added with host prefix
// length to an interface, stamped with egressd's address protocol (IFA_PROTO), and announced
// with gratuitous ARP or an unsolicited neighbour advertisement so that the link learns its new
// owner at once.
//
// The stamp is how egressd knows its own addresses after a restart: a new agent adopts them
// without removing and re-adding (no traffic gap), and removes those the cluster no longer
// assigns here (an address that moved to another node while this one was down must not keep
// answering ARP: upstream OVN-Kubernetes bug #6553). Addresses with another protocol are never
// touched.
//
// Everything works on the network namespace of the calling thread.
package addresses

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/dataplane"
)

// DefaultProtocol is the IFA_PROTO egressd stamps on its addresses (unassigned in
// /etc/iproute2/rt_addrprotos; upstream OVN-Kubernetes uses 85).
const DefaultProtocol = 229

// Addresses keeps the egress addresses of the node equal to the desired ones.
type Addresses struct {
	protocol uint8
	// lifetime is the valid lifetime of the addresses, renewed by Renew; 0 is forever.
	lifetime time.Duration

	mu sync.Mutex
	// owned are the addresses stamped with protocol, with the interface each is on, as last
	// seen or changed.
	owned map[netip.Addr]int
	// held is a copy of owned, published whenever a call that may change owned ends: Holds
	// reads it without waiting for an Apply that holds mu while it announces.
	held atomic.Pointer[map[netip.Addr]int]
	// unannounced were added but their announcement failed: retried on the next Apply.
	unannounced map[netip.Addr]bool
	// others are the node's addresses egressd did not stamp, as last listed.
	others []netip.Prefix
	// listed is when the kernel's addresses were last listed.
	listed time.Time
	// watched: a watch of the address events tells of changes (Watched); changed: it told of
	// one since the last listing (Changed). Prune trusts a listing only while watched.
	watched, changed atomic.Bool
}

// relist bounds how long Prune trusts the last listing: drift without an address event the
// agent heeds (an address stamped by hand on a pod's side) is found by the first sync after it.
var relist = time.Minute

// New adopts the addresses stamped with protocol in the current network namespace as they are;
// it adds addresses valid for lifetime (0: forever), which Renew must extend: an agent that dies
// with its node alive does not leave its egress addresses answering ARP after the cluster moved
// them (upstream #6553).
// They count as unannounced: the previous agent may have stopped between adding one and
// announcing it, so the first Apply that still wants one announces it again (never removing it).
// Protocol 0 is refused: it is what every address added without a protocol carries.
func New(protocol uint8, lifetime time.Duration) (*Addresses, error) {
	if protocol == 0 {
		return nil, errors.New("address protocol 0 would claim every unstamped address")
	}
	a := &Addresses{protocol: protocol, lifetime: lifetime, owned: map[netip.Addr]int{}, unannounced: map[netip.Addr]bool{}}
	if _, err := a.list(); err != nil {
		return nil, err
	}
	for ip := range a.owned {
		a.unannounced[ip] = true
	}
	a.publish()
	return a, nil
}

// list lists the kernel's addresses and records them (see). A change told while it lists is
// listed again next time.
func (a *Addresses) list() ([]kaddr, error) {
	a.changed.Store(false)
	kernel, err := dump()
	if err != nil {
		a.changed.Store(true)
		return nil, err
	}
	a.see(kernel)
	return kernel, nil
}

// see records the stamped addresses of a kernel listing, and the others.
func (a *Addresses) see(kernel []kaddr) {
	a.listed = time.Now()
	clear(a.owned)
	a.others = a.others[:0]
	for _, k := range kernel {
		if k.proto == a.protocol {
			a.owned[k.prefix.Addr()] = k.ifindex
		} else {
			a.others = append(a.others, k.prefix)
		}
	}
}

// Others are the node's own addresses, those egressd did not add (as of the last listing: New,
// Apply, Announce, a Prune that listed): the addresses it publishes as the node's
// (k8s.ovn.org/host-cidrs) come from them, without another listing of the kernel's addresses.
func (a *Addresses) Others() []netip.Prefix {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.others)
}

// Apply adds every wanted address that is missing, on its interface (Address.Interface, or
// else the UP interface whose network contains it, by longest prefix), and announces it. An
// address already there is left alone, except that a failed announcement is retried. An
// address on another interface than wanted is added on the new one, announced, then removed
// from the old. Nothing unwanted is removed: that is Prune. Returns the error per Origin.
func (a *Addresses) Apply(want []dataplane.Address) map[dataplane.Origin]error {
	a.mu.Lock()
	defer a.mu.Unlock()
	defer a.publish()
	failed := map[dataplane.Origin]error{}
	if len(want) == 0 && len(a.owned) == 0 {
		return failed // nothing to add or move (most nodes host no egress address): no listing
	}
	kernel, err := a.list()
	if err != nil {
		for _, w := range want {
			failed[w.Origin] = err
		}
		return failed
	}
	var links *linkSet
	// placed is where each address went in this Apply, and how that went: an address wanted by
	// several objects (on the same interface) is done once and reported to each.
	type outcome struct {
		ifindex int
		err     error
	}
	placed := map[netip.Addr]outcome{}
	for _, w := range want {
		ip := w.Addr.Unmap()
		if err := valid(ip); err != nil {
			failed[w.Origin] = err
			continue
		}
		if w.Interface == "" && links == nil {
			if links, err = readLinks(); err != nil {
				failed[w.Origin] = err
				continue
			}
		}
		ifindex, err := a.place(w.Interface, ip, kernel, links)
		if err != nil {
			failed[w.Origin] = err
			continue
		}
		prev, done := placed[ip]
		switch {
		case done && prev.ifindex != ifindex:
			err = fmt.Errorf("%s is wanted on two interfaces (%d and %d)", ip, prev.ifindex, ifindex)
		case done:
			err = prev.err
		default:
			err = a.ensure(ip, ifindex, kernel)
			placed[ip] = outcome{ifindex, err}
		}
		if err != nil {
			failed[w.Origin] = err
		}
	}
	return failed
}

// valid refuses what cannot be an egress address.
func valid(ip netip.Addr) error {
	if !ip.IsValid() || !ip.IsGlobalUnicast() || ip.Zone() != "" {
		return fmt.Errorf("%v is not a global unicast address", ip)
	}
	return nil
}

// ensure makes ip present, stamped, on ifindex only, announcing it when it was added there.
func (a *Addresses) ensure(ip netip.Addr, ifindex int, kernel []kaddr) error {
	present := false
	var elsewhere []kaddr
	for _, k := range kernel {
		if k.prefix.Addr() != ip {
			continue
		}
		switch {
		case k.proto != a.protocol:
			return fmt.Errorf("%s is already an address of interface %d, not added by egressd (protocol %d)", k.prefix, k.ifindex, k.proto)
		case k.ifindex == ifindex:
			present = true
		default:
			elsewhere = append(elsewhere, k)
		}
	}
	if !present {
		if err := add(ip, ifindex, a.protocol, a.lifetime); err != nil {
			return fmt.Errorf("add %s to interface %d: %w", ip, ifindex, err)
		}
		a.unannounced[ip] = true
	}
	a.owned[ip] = ifindex // moved here, if it was elsewhere
	a.publish()           // before its address event is read, where possible
	if a.unannounced[ip] {
		if err := announceOn(ifindex, ip); err != nil {
			return err
		}
		delete(a.unannounced, ip)
	}
	var errs []error
	for _, k := range elsewhere {
		if err := del(k); err != nil {
			errs = append(errs, fmt.Errorf("remove %s from interface %d after moving it to %d: %w", k.prefix, k.ifindex, ifindex, err))
		}
	}
	return errors.Join(errs...)
}

// announceOn announces ip on interface ifindex.
func announceOn(ifindex int, ip netip.Addr) error {
	ifi, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return fmt.Errorf("announce %s: interface %d: %w", ip, ifindex, err)
	}
	return Announce(ifi, ip)
}

// Announce announces ip again on the interface that holds it (after a link came back up, or when
// a neighbour may have missed the first announcement). ip must be one of egressd's addresses.
func (a *Addresses) Announce(ip netip.Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	defer a.publish()
	ip = ip.Unmap()
	kernel, err := a.list()
	if err != nil {
		return err
	}
	for _, k := range kernel {
		if k.prefix.Addr() == ip && k.proto == a.protocol {
			if err := announceOn(k.ifindex, ip); err != nil {
				a.unannounced[ip] = true
				return err
			}
			delete(a.unannounced, ip)
			return nil
		}
	}
	return fmt.Errorf("%s is not an egressd address on this node", ip)
}

// Watched tells whether the address events are watched from now on, each change told by
// Changed; until then, and once the watch ends, Prune lists the addresses every time.
func (a *Addresses) Watched(on bool) {
	a.watched.Store(on)
	a.changed.Store(true) // what changed before the watch began
}

// publish makes what owned holds now the answer of Holds. Called with mu held.
func (a *Addresses) publish() {
	held := maps.Clone(a.owned)
	a.held.Store(&held)
}

// Holds reports whether ip is an address egressd holds on interface ifindex, as of the last
// call that ended: an address event for it is egressd's own doing (its adding, the renewal of
// its lifetime every third of it), not a change to look at. It never waits.
func (a *Addresses) Holds(ip netip.Addr, ifindex int) bool {
	held := a.held.Load()
	i, ok := (*held)[ip.Unmap()]
	return ok && i == ifindex
}

// Changed tells that the node's addresses changed behind egressd (an address event): the next
// Prune lists them again instead of trusting what it last saw. It never waits (an Apply may hold
// the addresses for a while, announcing).
func (a *Addresses) Changed() { a.changed.Store(true) }

// Prune removes every address stamped with egressd's protocol whose IP is not wanted. Called at
// start-up too, before anything else is announced, so that an address assigned elsewhere while
// the agent was down stops answering for it at once.
//
// While the address events are watched (Watched), it lists the kernel's addresses only when
// something may be to remove: an address it owns is no longer wanted, or the addresses changed
// (Changed) or were last listed over relist ago. Every new pod adds addresses to the node;
// listing them all at every sync was a quarter of a sync's time with a few hundred pods.
func (a *Addresses) Prune(want []dataplane.Address) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	defer a.publish()
	keep := map[netip.Addr]bool{}
	for _, w := range want {
		keep[w.Addr.Unmap()] = true
	}
	if a.watched.Load() && !a.changed.Load() && time.Since(a.listed) < relist && a.ownedWanted(keep) {
		return nil
	}
	kernel, err := a.list()
	if err != nil {
		return err
	}
	var errs []error
	for _, k := range kernel {
		ip := k.prefix.Addr()
		if k.proto != a.protocol || keep[ip] {
			continue
		}
		if err := del(k); err != nil {
			errs = append(errs, fmt.Errorf("remove %s from interface %d: %w", k.prefix, k.ifindex, err))
			continue
		}
		delete(a.owned, ip)
		delete(a.unannounced, ip)
	}
	return errors.Join(errs...)
}

// ownedWanted reports whether every address egressd owns is in keep.
func (a *Addresses) ownedWanted(keep map[netip.Addr]bool) bool {
	for ip := range a.owned {
		if !keep[ip] {
			return false
		}
	}
	return true
}

// Renew extends the lifetime of every address egressd owns (nothing when they live forever).
func (a *Addresses) Renew() error {
	if a.lifetime == 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.owned) == 0 {
		return nil // most nodes host none: no listing every few seconds
	}
	kernel, err := dump()
	if err != nil {
		return err
	}
	var ours []kaddr
	for _, k := range kernel {
		if k.proto == a.protocol {
			ours = append(ours, k)
		}
	}
	return renew(ours, a.protocol, a.lifetime)
}

// Cleanup removes every address stamped with protocol from the current network namespace
// (egressctl cleanup). Protocol 0 is refused, as for New.
func Cleanup(protocol uint8) error {
	a, err := New(protocol, 0)
	if err != nil {
		return err
	}
	return a.Prune(nil)
}

// Hosted lists, for egressctl, the addresses stamped with protocol in the current network
// namespace and the interface index each is on.
func Hosted(protocol uint8) (map[netip.Prefix]int, error) {
	kernel, err := dump()
	if err != nil {
		return nil, err
	}
	out := map[netip.Prefix]int{}
	for _, k := range kernel {
		if k.proto == protocol {
			out[k.prefix] = k.ifindex
		}
	}
	return out, nil
}
