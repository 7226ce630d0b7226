package dnsnames

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/internal/dnsname"
)

// Learned answers: the addresses the DNS answers to pods gave for a wanted name (read on their
// way to the pod, package dnssnoop), kept for the record's TTL plus learnGrace. A name asked
// again a moment later often gets other addresses (rotating answers of object stores, CDNs,
// geo-DNS, another resolver): what the pod got is what it connects to, so that is what its
// rule must allow. Wildcard rules (`*.example.com`) match only through them: no query can ask
// for every name under a domain.

const (
	// learnGrace keeps an address this long past its TTL: a pod that connects just as its
	// answer expires is not cut off (upstream's DNSNameResolver removes an address 5 s after
	// its TTL).
	learnGrace = 5 * time.Second
	// learnMinTTL is the least an answer is kept for (a TTL of 0 still lets the pod connect
	// after its lookup): upstream's DNSNameResolver minimum.
	learnMinTTL = 5 * time.Second
	// learnMaxTTL bounds how long an address outlives its answer without another one.
	learnMaxTTL = 24 * time.Hour
	// MaxLearnedNames caps the names whose answers are kept at once (each wanted name, and every
	// name a wildcard matched).
	MaxLearnedNames = 20000
	// MaxWildcardAddresses caps the addresses kept under one wildcard, over every name it
	// matched: each is an entry of every namespace whose rule names the wildcard, and a domain
	// can have any number of names.
	MaxWildcardAddresses = 4 * MaxAddresses
	// DefaultNamespaceAddresses is the default cap of the addresses kept at once for the
	// answers to one namespace's pods (LimitNamespaces).
	DefaultNamespaceAddresses = 8 * MaxAddresses
)

// learnedAddr is an address learned for a name.
type learnedAddr struct {
	name string
	addr netip.Addr
}

// IsWildcard tells a wildcard name (`*.example.com`): it matches a name with exactly one more
// label, never the domain itself nor a name two labels deeper.
func IsWildcard(name string) bool { return strings.HasPrefix(name, "*.") }

// parent is the wildcard that would match name (`a.example.com` -> `*.example.com`); "" for a
// name of one label.
func parent(name string) string {
	i := strings.IndexByte(name, '.')
	if i < 0 {
		return ""
	}
	return "*" + name[i:]
}

// Wants tells whether an answer for name (canonical) is kept: a wanted name, or a name a wanted
// wildcard matches.
func (r *Resolver) Wants(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wants(name)
}

// wants is Wants with r.mu held.
func (r *Resolver) wants(name string) bool {
	_, exact := r.entries[name]
	return exact || r.wildcards[parent(name)]
}

// Learn keeps addrs, answered for name with ttl to a pod of namespace, if name is wanted. It
// reports whether an address was new to name, and the generation a sync must have applied for
// them to be in force (Applied, WaitApplied). Beyond MaxAddresses per name, MaxWildcardAddresses
// under a wildcard, the namespace's cap (LimitNamespaces), or MaxLearnedNames, new addresses
// are not kept (counted in Stats; a namespace at its cap is in Capped).
func (r *Resolver) Learn(namespace, name string, addrs []netip.Addr, ttl time.Duration) (gen uint64, fresh bool) {
	name = dnsname.Canonical(name)
	expiry := time.Now().Add(min(max(ttl, learnMinTTL), learnMaxTTL) + learnGrace)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.wants(name) {
		return r.gen, false
	}
	capped := false
	room := MaxAddresses // for name's new addresses
	if _, exact := r.entries[name]; !exact {
		room = MaxWildcardAddresses - len(r.learnedFor(parent(name)))
	}
	known := r.learned[name]
	if known == nil {
		if len(r.learned) >= MaxLearnedNames {
			r.stats.Refused += uint64(len(addrs))
			return r.gen, false
		}
		known = map[netip.Addr]time.Time{}
		r.keep(name, known)
	}
	for _, a := range addrs {
		switch old, ok := known[a]; {
		case ok:
			if expiry.After(old) {
				known[a] = expiry
			}
		case len(known) >= MaxAddresses || room <= 0:
			r.stats.Refused++
		case r.taught[namespace] >= r.nsCap:
			r.stats.Refused++
			if !r.capped[namespace] {
				r.capped[namespace] = true
				capped = true
				r.log.Warn("DNS answers to the namespace's pods are no longer learned: it reached its cap", "namespace", namespace, "cap", r.nsCap)
			}
		default:
			known[a] = expiry
			fresh = true
			room--
			r.stats.Learned++
			r.teachers[learnedAddr{name, a}] = namespace
			r.taught[namespace]++
		}
	}
	if fresh {
		r.gen++
	}
	if fresh || capped { // a sync puts them in force, or says the cap in the status
		r.signal()
	}
	r.markDirty() // expiries moved, if nothing else
	r.scheduleExpiry()
	return r.gen, fresh
}

// LearnStats are counts of the learned answers.
type LearnStats struct {
	Learned uint64 // addresses kept now, over every name
	Refused uint64 // addresses not kept, for the caps, since the start
	Capped  int    // namespaces at their cap that an answer was refused to
}

// LimitNamespaces sets the cap of the addresses kept at once for the answers to one
// namespace's pods, counted against the namespace whose answer brought each first: pods
// asking name after name under a wildcard, or a namespace with many dnsName rules, cannot
// crowd out what the other namespaces' answers teach, and each learned address is an element
// of the node's nftables sets. The node's report notes when it is reached (Capped).
func (r *Resolver) LimitNamespaces(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nsCap = n
}

// Capped are the namespaces at their cap that an answer was refused to, each with why: what
// the answers to their pods give is not learned until some of their addresses expire.
func (r *Resolver) Capped() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.capped))
	for ns := range r.capped {
		out[ns] = fmt.Sprintf("DNS answers to its pods are not learned: the namespace keeps %d learned addresses, its cap, until some expire", r.nsCap)
	}
	return out
}

// forget releases a learned address from its namespace's count. r.mu held.
func (r *Resolver) forget(name string, a netip.Addr) {
	k := learnedAddr{name, a}
	ns, ok := r.teachers[k]
	if !ok {
		return // kept by an earlier agent
	}
	delete(r.teachers, k)
	if r.taught[ns]--; r.taught[ns] == 0 {
		delete(r.taught, ns)
	}
	if r.capped[ns] && r.taught[ns] < r.nsCap {
		delete(r.capped, ns)
		r.signal() // its status no longer says the cap
	}
}

// Stats returns the counts of learned answers.
func (r *Resolver) Stats() LearnStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Capped = len(r.capped)
	return s
}

// Generation is the version of the learned addresses: a sync that compiled from it and was
// applied reports it to Applied.
func (r *Resolver) Generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}

// Applied is told that a sync which compiled from generation gen is applied.
func (r *Resolver) Applied(gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen <= r.applied {
		return
	}
	r.applied = gen
	close(r.appliedCh)
	r.appliedCh = make(chan struct{})
}

// WaitApplied waits until a sync that compiled from generation gen (or a later one) is
// applied, or ctx ends.
func (r *Resolver) WaitApplied(ctx context.Context, gen uint64) error {
	for {
		r.mu.Lock()
		done, ch := r.applied >= gen, r.appliedCh
		r.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// learnedFor are the unexpired learned addresses for name, or for every name a wildcard
// matches. r.mu held.
func (r *Resolver) learnedFor(name string) []netip.Addr {
	now := time.Now()
	var out []netip.Addr
	add := func(m map[netip.Addr]time.Time) {
		for a, exp := range m {
			if exp.After(now) {
				out = append(out, a)
			}
		}
	}
	if !IsWildcard(name) {
		add(r.learned[name])
		return out
	}
	for n := range r.children[name] {
		add(r.learned[n])
	}
	return out
}

// keep and drop add and remove a name's learned addresses, indexed under its wildcard too (a
// wildcard's lookup reads its own names, not every name learned). r.mu held.
func (r *Resolver) keep(name string, m map[netip.Addr]time.Time) {
	r.learned[name] = m
	r.stats.Learned += uint64(len(m))
	p := parent(name)
	if r.children[p] == nil {
		r.children[p] = map[string]bool{}
	}
	r.children[p][name] = true
}

func (r *Resolver) drop(name string) {
	for a := range r.learned[name] {
		r.forget(name, a)
	}
	r.stats.Learned -= uint64(len(r.learned[name]))
	delete(r.learned, name)
	p := parent(name)
	delete(r.children[p], name)
	if len(r.children[p]) == 0 {
		delete(r.children, p)
	}
}

// forgetUnwanted drops what was learned for names no longer wanted. r.mu held.
func (r *Resolver) forgetUnwanted() {
	for name := range r.learned {
		if !r.wants(name) {
			r.drop(name)
			r.gen++
			r.markDirty()
		}
	}
}

// scheduleExpiry arms the timer for the earliest expiry. r.mu held.
func (r *Resolver) scheduleExpiry() {
	var next time.Time
	for _, m := range r.learned {
		for _, exp := range m {
			if next.IsZero() || exp.Before(next) {
				next = exp
			}
		}
	}
	if r.expiry != nil {
		r.expiry.Stop()
		r.expiry = nil
	}
	if !next.IsZero() {
		r.expiry = time.AfterFunc(time.Until(next), r.expire)
	}
}

// expire drops the addresses whose time is up; a sync then stops allowing them.
func (r *Resolver) expire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	dropped := false
	for name, m := range r.learned {
		maps.DeleteFunc(m, func(a netip.Addr, exp time.Time) bool {
			gone := !exp.After(now)
			if gone {
				dropped = true
				r.stats.Learned--
				r.forget(name, a)
			}
			return gone
		})
		if len(m) == 0 {
			r.drop(name)
		}
	}
	if dropped {
		r.gen++
		r.signal()
		r.markDirty()
	}
	r.scheduleExpiry()
}

// union is a and b, sorted, without duplicates.
func union(a, b []netip.Addr) []netip.Addr {
	if len(b) == 0 {
		return a
	}
	out := slices.Concat(a, b)
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
