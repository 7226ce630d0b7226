// Package dnsnames resolves the DNS names EgressFirewall rules refer to, as upstream's built-in
// resolver does: A and AAAA, refreshed when the answer's smallest TTL expires (CNAME records of
// the chain included; 5 s for a TTL of 0, the record's TTL otherwise, at most 30 min, and never
// sooner than a configurable minimum that protects the resolver); on failure the last addresses
// are kept and the query retried every 5 s, then with a backoff doubling up to 2 min. Every
// nameserver of the configuration is asked, in order, until one answers. One resolution per
// distinct name, shared by every namespace; names are case-insensitive. The last addresses are
// kept in a state file, so that a restarted agent answers with them until a name's first fresh
// answer, instead of nothing (and a rule "allow the name, then deny everything" dropping its
// traffic until the DNS answers again).
package dnsnames

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/internal/dnsname"
)

// Resolver keeps the addresses of the wanted names fresh.
type Resolver struct {
	servers []string
	log     *slog.Logger
	client  *dns.Client

	// Timing, upstream's values (minTTL: the operator's floor); tests shorten them.
	zeroTTL, minTTL, maxTTL, retry, maxBackoff time.Duration
	retriesBeforeBackoff                       int

	mu      sync.Mutex
	entries map[string]*entry
	changed chan struct{}
	ctx     context.Context

	// Learned answers (learned.go): by name, each address with its expiry; the wanted
	// wildcards; the generation of the learned addresses, and the last one a sync applied.
	learned   map[string]map[netip.Addr]time.Time
	children  map[string]map[string]bool // the learned names under each wildcard that would match them
	wildcards map[string]bool
	gen       uint64
	applied   uint64
	appliedCh chan struct{} // closed and replaced when applied grows
	expiry    *time.Timer
	stats     LearnStats
	// By namespace, the learned addresses its pods' answers brought first (teachers: who
	// brought each; those an earlier agent kept have none); capped, the namespaces an answer
	// was refused to for the cap nsCap, until they are under it again.
	nsCap    int
	taught   map[string]int
	teachers map[learnedAddr]string
	capped   map[string]bool

	// state is the file the addresses are kept in across restarts ("": none), written at most
	// every saveEvery after a change (dirty); remembered are those an earlier agent kept there,
	// by name, each taken by the name's entry when it is wanted (and answered by Lookup until
	// then: the first compile looks names up before it says which it wants).
	state      string
	saveEvery  time.Duration
	stopped    chan struct{}
	dirty      chan struct{}
	remembered map[string][]netip.Addr
}

type entry struct {
	addrs  []netip.Addr
	cancel context.CancelFunc
}

// StateFile is the name of the file, in the agent's state directory (next to its CNI socket),
// that keeps each name's last addresses across a restart of the agent.
const StateFile = "dnsnames.json"

// New returns a resolver asking servers ("ip:port", in order until one answers), refreshing no
// sooner than minTTL, keeping the addresses in the file state ("": nowhere) and starting from
// those an earlier agent kept there; it stops when ctx ends.
func New(ctx context.Context, servers []string, minTTL time.Duration, state string, log *slog.Logger) *Resolver {
	r := &Resolver{
		servers: servers, log: log, client: &dns.Client{Timeout: 5 * time.Second},
		zeroTTL: 5 * time.Second, minTTL: minTTL, maxTTL: 30 * time.Minute, retry: 5 * time.Second, maxBackoff: 2 * time.Minute,
		retriesBeforeBackoff: 10,
		entries:              map[string]*entry{}, changed: make(chan struct{}, 1), ctx: ctx,
		learned: map[string]map[netip.Addr]time.Time{}, children: map[string]map[string]bool{}, wildcards: map[string]bool{},
		nsCap: DefaultNamespaceAddresses, taught: map[string]int{}, teachers: map[learnedAddr]string{}, capped: map[string]bool{},
		appliedCh: make(chan struct{}),
		state:     state, saveEvery: time.Second, dirty: make(chan struct{}, 1), stopped: make(chan struct{}),
	}
	if state != "" {
		var err error
		if r.remembered, err = load(state); err != nil {
			log.Error("dnsName addresses of the previous agent not read: names match nothing until they resolve", "file", state, "err", err)
		}
		// Until the first Want, which drops those of names no longer wanted: connections to
		// what pods were answered before the restart are judged as before it.
		learned, err := loadLearned(learnedFile(state))
		if err != nil {
			log.Error("dnsName addresses learned by the previous agent not read: pods' connections to them are denied until asked again", "file", learnedFile(state), "err", err)
		}
		for name, m := range learned {
			r.keep(name, m)
		}
		if learned != nil {
			r.scheduleExpiry()
		}
		go r.saving()
	} else {
		close(r.stopped)
	}
	return r
}

// Stopped is closed once ctx has ended and the last change is in the state file: an agent that
// exits before loses what it learned last.
func (r *Resolver) Stopped() <-chan struct{} { return r.stopped }

// Want sets the names whose addresses rules need: exact names are kept resolved (new ones start
// resolving, others stop); for them and for wildcards, answers to pods are learned.
func (r *Resolver) Want(names []string) {
	want, wildcards := map[string]bool{}, map[string]bool{}
	for _, n := range names {
		if IsWildcard(n) {
			wildcards[dnsname.Canonical(n)] = true
		} else {
			want[dnsname.Canonical(n)] = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.forgetUnwanted()
	r.wildcards = wildcards
	for name, e := range r.entries {
		if !want[name] {
			e.cancel()
			delete(r.entries, name)
			r.markDirty()
		}
	}
	for name := range want {
		if _, ok := r.entries[name]; !ok {
			if len(r.entries) >= MaxNames {
				r.log.Error("more dnsName names than resolved at once: the rest are not resolved (their rules match nothing)",
					"max", MaxNames, "wanted", len(want))
				break
			}
			ctx, cancel := context.WithCancel(r.ctx)
			r.entries[name] = &entry{cancel: cancel}
			if addrs, ok := r.remembered[name]; ok {
				// Taken over: the file is written again with the names wanted now.
				r.entries[name].addrs = addrs
				delete(r.remembered, name)
				r.markDirty()
			}
			go r.run(ctx, name)
		}
	}
}

// Lookup returns the addresses of name: its last resolved ones (those an earlier agent kept,
// until it first resolves here; none when it never resolved) and those learned from the answers
// pods got; for a wildcard, those learned for every name it matches.
func (r *Resolver) Lookup(name string) []netip.Addr {
	name = dnsname.Canonical(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	learned := r.learnedFor(name)
	if e, ok := r.entries[name]; ok {
		return union(e.addrs, learned)
	}
	return union(r.remembered[name], learned)
}

// Changed receives a value after any name's addresses changed.
func (r *Resolver) Changed() <-chan struct{} { return r.changed }

func (r *Resolver) run(ctx context.Context, name string) {
	failures := 0
	for {
		addrs, ttl, err := r.resolve(ctx, name)
		var wait time.Duration
		if err == nil {
			failures = 0
			wait = ttl
			if wait == 0 {
				wait = r.zeroTTL
			}
			wait = min(max(wait, r.minTTL), r.maxTTL)
			r.set(name, addrs)
		} else {
			failures++
			wait = r.retry
			if failures > r.retriesBeforeBackoff {
				wait = min(r.retry<<min(failures-r.retriesBeforeBackoff, 10), r.maxBackoff)
			}
			if ctx.Err() == nil {
				r.log.Warn("dns resolution failed; keeping the last addresses", "name", name, "failures", failures, "retryIn", wait, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (r *Resolver) set(name string, addrs []netip.Addr) {
	r.mu.Lock()
	e, ok := r.entries[name]
	changed := ok && !slices.Equal(e.addrs, addrs)
	if changed {
		e.addrs = addrs
		r.markDirty()
	}
	r.mu.Unlock()
	if changed {
		r.log.Info("dns name resolved", "name", name, "addresses", addrs)
		r.signal()
	}
}

// signal tells the sync loop that addresses changed.
func (r *Resolver) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// MaxAddresses caps the addresses kept per name (a name answered with more keeps the lowest):
// each is an LPM entry per namespace that uses the name.
const MaxAddresses = 256

// MaxNames caps the names resolved at once (each has its own refresh): EgressFirewalls are
// written by namespace owners, and 10,000 namespaces with two dnsName rules each fit.
const MaxNames = 20000

// resolve asks for A and AAAA; the addresses and TTL are those Answered finds. No address at
// all is a failure (upstream keeps the previous addresses then).
func (r *Resolver) resolve(ctx context.Context, name string) ([]netip.Addr, time.Duration, error) {
	var addrs []netip.Addr
	ttl := uint32(1<<32 - 1)
	var errs []error
	for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		resp, err := r.exchange(ctx, name, qtype)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		got, t := dnsname.Answered(name, resp.Answer)
		if len(got) > 0 {
			addrs, ttl = append(addrs, got...), min(ttl, t)
		}
	}
	if len(addrs) == 0 {
		errs = append(errs, fmt.Errorf("%s: no addresses", name))
		return nil, 0, errors.Join(errs...)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	if len(addrs) > MaxAddresses {
		r.log.Warn("dns name answered with more addresses than kept", "name", name, "addresses", len(addrs), "kept", MaxAddresses)
		addrs = addrs[:MaxAddresses]
	}
	return addrs, time.Duration(ttl) * time.Second, nil
}

// exchange asks the servers in order until one answers (a server failure or refusal counts as
// no answer, as a stub resolver moves on); TCP when the answer is truncated.
func (r *Resolver) exchange(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.SetEdns0(1232, false) // the DNS flag day's size: most answers in one datagram, no fragments
	if len(r.servers) == 0 {
		return nil, fmt.Errorf("no nameserver to ask for %s", name)
	}
	var errs []error
	for _, server := range r.servers {
		resp, _, err := r.client.ExchangeContext(ctx, m, server)
		if err == nil && resp.Truncated {
			tcp := &dns.Client{Net: "tcp", Timeout: r.client.Timeout}
			resp, _, err = tcp.ExchangeContext(ctx, m, server)
		}
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", server, err))
		case resp.Rcode == dns.RcodeServerFailure || resp.Rcode == dns.RcodeRefused:
			errs = append(errs, fmt.Errorf("%s: %s %s: %s", server, name, dns.TypeToString[qtype], dns.RcodeToString[resp.Rcode]))
		case resp.Rcode != dns.RcodeSuccess:
			return nil, fmt.Errorf("%s: %s %s: %s", server, name, dns.TypeToString[qtype], dns.RcodeToString[resp.Rcode])
		case len(resp.Question) != 1 || !strings.EqualFold(resp.Question[0].Name, m.Question[0].Name) || resp.Question[0].Qtype != qtype:
			errs = append(errs, fmt.Errorf("%s: the answer is for another question than %s %s", server, name, dns.TypeToString[qtype]))
		default:
			return resp, nil
		}
	}
	return nil, errors.Join(errs...)
}
