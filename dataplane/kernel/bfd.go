package kernel

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/bfd"
)

// bfdFacility is the BFD sessions to the gateways whose liveness gates nexthops; a session
// state change triggers a sync, so that a gateway Down leaves its groups at once.
type bfdFacility struct {
	// m runs the sessions, started with the first peer: its UDP port (3784) stays free for a
	// node's own BFD daemon until egressd needs it.
	m  *bfd.Manager
	mu sync.Mutex // metrics scrapes read m while install may start it
	// inherited are the gateways the previous agent's routes used (routing.Router.InUse), taken
	// as alive until their own BFD session comes up or inheritUntil: a restarted agent's
	// sessions start Down, and judging by them alone would take every BFD-gated gateway out of
	// use, and flush the connections it brought, at every restart. Apply's goroutine only.
	inherited    map[netip.Addr]bool
	inheritUntil time.Time
	done         <-chan struct{}
	ask          func()
	log          *slog.Logger
}

// inherit takes the gateways the previous agent used as alive for inheritGrace.
func (f *bfdFacility) inherit(inUse []netip.Addr) {
	if len(inUse) == 0 {
		return
	}
	f.inherited, f.inheritUntil = map[netip.Addr]bool{}, time.Now().Add(inheritGrace)
	for _, gw := range inUse {
		f.inherited[gw] = true
	}
	// Judged by the sessions alone from then on.
	time.AfterFunc(inheritGrace, f.ask)
}

func (*bfdFacility) name() string { return "bfd" }

// install makes the sessions those of the state's peers; a session that cannot start fails
// its object.
func (f *bfdFacility) install(p *pass) map[dataplane.Origin]error {
	peers := p.state.BFD
	m := f.manager()
	if m == nil && len(peers) == 0 {
		return nil
	}
	if m == nil {
		var err error
		if m, err = f.start(); err != nil {
			failed := map[dataplane.Origin]error{}
			for _, p := range peers {
				failed[p.Origin] = fmt.Errorf("BFD: %w", err)
			}
			return failed
		}
	}
	want := make([]bfd.Config, 0, len(peers))
	owners := map[bfd.Key][]dataplane.Origin{}
	for _, p := range peers {
		c := bfd.Config{Peer: p.Peer, Interface: p.Interface,
			Timers: bfd.Timers{DesiredMinTx: p.MinTx, RequiredMinRx: p.MinRx, DetectMult: p.Multiplier}}
		if _, dup := owners[c.Key()]; !dup {
			want = append(want, c)
		}
		owners[c.Key()] = append(owners[c.Key()], p.Origin)
	}
	failed := map[dataplane.Origin]error{}
	for k, err := range m.Sync(want) {
		for _, o := range owners[k] {
			failed[o] = errors.Join(failed[o], fmt.Errorf("BFD session to %s: %w", k.Peer, err))
		}
	}
	return failed
}

// inheritGrace bounds how long a restarted agent takes the previous one's word that a gateway
// is alive: a new BFD session comes up within about two seconds (RFC 5880's one-second
// transmit interval until Up).
const inheritGrace = 5 * time.Second

// up reports whether a gateway is alive: its BFD session is Up, or, after a restart, the
// previous agent used it and its new session has not been Up yet (inherited).
func (f *bfdFacility) up() func(netip.Addr) bool {
	up := map[netip.Addr]bool{}
	if m := f.manager(); m != nil {
		for _, s := range m.Sessions() {
			if s.State == bfd.Up {
				up[s.Key.Peer] = true
				delete(f.inherited, s.Key.Peer) // its own session speaks for it now
			}
		}
	}
	if time.Now().After(f.inheritUntil) {
		f.inherited = nil
	}
	inherited := f.inherited
	return func(peer netip.Addr) bool { return up[peer] || inherited[peer] }
}

// manager is the sessions' manager, nil until the first peer (and for a nil facility: the
// metrics reference's Applier has none).
func (f *bfdFacility) manager() *bfd.Manager {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m
}

// start starts the sessions' manager; each session state change triggers a sync.
func (f *bfdFacility) start() (*bfd.Manager, error) {
	m, err := bfd.New(f.log.With("facility", "bfd"))
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.m = m
	f.mu.Unlock()
	transitions, unsubscribe := m.Subscribe()
	go func() {
		defer unsubscribe()
		for {
			select {
			case <-f.done:
				return
			case <-transitions:
				f.ask()
			}
		}
	}()
	return m, nil
}

// close ends the sessions, if any ran.
func (f *bfdFacility) close() {
	if m := f.manager(); m != nil {
		m.Close()
	}
}

// bfdCollector exports the BFD metrics once sessions run (the series exist only then).
type bfdCollector struct{ f *bfdFacility }

func (bfdCollector) Describe(ch chan<- *prometheus.Desc) { bfd.Describe(ch) }

func (c bfdCollector) Collect(ch chan<- prometheus.Metric) {
	if m := c.f.manager(); m != nil {
		for _, col := range m.Collectors() {
			col.Collect(ch)
		}
	}
}
