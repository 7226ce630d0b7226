// Package dnsnames resolves the DNS names EgressFirewall rules refer to, as upstream's built-in
// resolver does: A and AAAA against the configured server, refreshed when the answer's minimum
// TTL expires (5 s for a TTL of 0, at most 30 min); on failure the last addresses are kept and
// the query retried every 5 s, then with a backoff doubling up to 2 min. One resolution per
// distinct name, shared by every namespace; names are case-insensitive.
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
)

// Resolver keeps the addresses of the wanted names fresh.
type Resolver struct {
	server string
	log    *slog.Logger
	client *dns.Client

	// Timing, upstream's values; tests shorten them.
	minTTL, maxTTL, retry, maxBackoff time.Duration
	retriesBeforeBackoff              int

	mu      sync.Mutex
	entries map[string]*entry
	changed chan struct{}
	ctx     context.Context
}

type entry struct {
	addrs  []netip.Addr
	cancel context.CancelFunc
}

// New returns a resolver querying server ("ip:port"); it stops when ctx ends.
func New(ctx context.Context, server string, log *slog.Logger) *Resolver {
	return &Resolver{
		server: server, log: log, client: &dns.Client{Timeout: 5 * time.Second},
		minTTL: 5 * time.Second, maxTTL: 30 * time.Minute, retry: 5 * time.Second, maxBackoff: 2 * time.Minute,
		retriesBeforeBackoff: 10,
		entries:              map[string]*entry{}, changed: make(chan struct{}, 1), ctx: ctx,
	}
}

// Canonical is the form names are compared in: lower case, no trailing dot.
func Canonical(name string) string { return strings.TrimSuffix(strings.ToLower(name), ".") }

// Want sets the names to keep resolved: new ones start resolving, others stop.
func (r *Resolver) Want(names []string) {
	want := map[string]bool{}
	for _, n := range names {
		want[Canonical(n)] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, e := range r.entries {
		if !want[name] {
			e.cancel()
			delete(r.entries, name)
		}
	}
	for name := range want {
		if _, ok := r.entries[name]; !ok {
			ctx, cancel := context.WithCancel(r.ctx)
			r.entries[name] = &entry{cancel: cancel}
			go r.run(ctx, name)
		}
	}
}

// Lookup returns the last addresses of name (none until it first resolves).
func (r *Resolver) Lookup(name string) []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.entries[Canonical(name)]; ok {
		return e.addrs
	}
	return nil
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
			wait = min(max(ttl, r.minTTL), r.maxTTL)
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
	}
	r.mu.Unlock()
	if changed {
		r.log.Info("dns name resolved", "name", name, "addresses", addrs)
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
}

// resolve asks for A and AAAA; the TTL is the minimum over the answers. No address at all is a
// failure (upstream keeps the previous addresses then).
func (r *Resolver) resolve(ctx context.Context, name string) ([]netip.Addr, time.Duration, error) {
	var addrs []netip.Addr
	ttl := uint32(1<<32 - 1)
	var errs []error
	for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), qtype)
		resp, _, err := r.client.ExchangeContext(ctx, m, r.server)
		if err == nil && resp.Truncated {
			tcp := &dns.Client{Net: "tcp", Timeout: r.client.Timeout}
			resp, _, err = tcp.ExchangeContext(ctx, m, r.server)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if resp.Rcode != dns.RcodeSuccess {
			errs = append(errs, fmt.Errorf("%s %s: %s", name, dns.TypeToString[qtype], dns.RcodeToString[resp.Rcode]))
			continue
		}
		for _, rr := range resp.Answer {
			var ip netip.Addr
			switch v := rr.(type) {
			case *dns.A:
				ip, _ = netip.AddrFromSlice(v.A.To4())
			case *dns.AAAA:
				ip, _ = netip.AddrFromSlice(v.AAAA)
			default:
				continue
			}
			addrs = append(addrs, ip)
			ttl = min(ttl, rr.Header().Ttl)
		}
	}
	if len(addrs) == 0 {
		errs = append(errs, fmt.Errorf("%s: no addresses", name))
		return nil, 0, errors.Join(errs...)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	return slices.Compact(addrs), time.Duration(ttl) * time.Second, nil
}
