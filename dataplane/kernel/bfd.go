package kernel

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/bfd"
)

// syncBFD makes the sessions those of peers; a session that cannot start fails its object.
func (d *Applier) syncBFD(peers []dataplane.BFDPeer) map[dataplane.Origin]error {
	m := d.bfdManager()
	if m == nil && len(peers) == 0 {
		return nil
	}
	if m == nil {
		var err error
		if m, err = d.startBFD(); err != nil {
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

// bfdUp reports whether a gateway is alive: its BFD session is Up, or, after a restart, the
// previous agent used it and its new session has not been Up yet (inherited).
func (d *Applier) bfdUp() func(netip.Addr) bool {
	up := map[netip.Addr]bool{}
	if m := d.bfdManager(); m != nil {
		for _, s := range m.Sessions() {
			if s.State == bfd.Up {
				up[s.Key.Peer] = true
				delete(d.inherited, s.Key.Peer) // its own session speaks for it now
			}
		}
	}
	if time.Now().After(d.inheritUntil) {
		d.inherited = nil
	}
	inherited := d.inherited
	return func(peer netip.Addr) bool { return up[peer] || inherited[peer] }
}

func (d *Applier) bfdManager() *bfd.Manager {
	d.bfdMu.Lock()
	defer d.bfdMu.Unlock()
	return d.bfd
}

// startBFD starts the sessions' manager; each session state change triggers a sync, so that a
// gateway Down leaves its nexthop groups at once.
func (d *Applier) startBFD() (*bfd.Manager, error) {
	m, err := bfd.New(d.log.With("facility", "bfd"))
	if err != nil {
		return nil, err
	}
	d.bfdMu.Lock()
	d.bfd = m
	d.bfdMu.Unlock()
	transitions, unsubscribe := m.Subscribe()
	go func() {
		defer unsubscribe()
		for {
			select {
			case <-d.done:
				return
			case <-transitions:
				d.signal()
			}
		}
	}()
	return m, nil
}

// bfdCollector exports the BFD metrics once sessions run (the series exist only then).
type bfdCollector struct{ d *Applier }

func (bfdCollector) Describe(ch chan<- *prometheus.Desc) { bfd.Describe(ch) }

func (c bfdCollector) Collect(ch chan<- prometheus.Metric) {
	if m := c.d.bfdManager(); m != nil {
		for _, col := range m.Collectors() {
			col.Collect(ch)
		}
	}
}
