package bfd

import (
	"container/heap"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Sync makes the Manager's sessions those of want, and returns an error per Key it could not
// bring to its wanted configuration (empty when all applied). It is idempotent, and runs as one
// step of the event loop, so no packet is processed against a half-applied set.
//
//   - A Key not running yet gets a new session (Down, fresh discriminator).
//   - A session whose Key is not in want is removed: it announces AdminDown to the peer for a
//     detection time (so the peer sees a deliberate shutdown, not a failure), then goes away.
//   - A session whose Config is unchanged is untouched: state, discriminators, counters.
//   - A change of timers only (Desired Min TX, Required Min RX, multiplier) is applied in place:
//     the session keeps its state and discriminators, and while Up the new intervals are
//     negotiated with a Poll Sequence (RFC 5880 section 6.8.3): a faster transmit rate or a
//     longer detection time applies at once, a slower transmit rate or a shorter detection time
//     only when the peer answers with Final. The multiplier goes out in the next packet (the
//     peer recomputes its detection time from every packet; no Poll needed).
//   - A change of local address is a different session to the peer (single-hop peers know us
//     by that address), so the session is recreated: the new send socket is opened first; then
//     the old session sends one AdminDown packet and is replaced by a new one, Down, with a new
//     discriminator.
//
// A Key whose Config is invalid, appears twice with different contents, or whose socket cannot
// be opened gets an error and keeps whatever session it had, so a bad update never takes a
// working session down; the next Sync retries.
func (m *Manager) Sync(want []Config) map[Key]error {
	errs := map[Key]error{}
	if !m.do(func() { m.sync(want, time.Now(), errs) }) {
		for _, c := range want {
			errs[c.Key()] = errClosed
		}
	}
	return errs
}

// sync runs on the event loop.
func (m *Manager) sync(want []Config, now time.Time, errs map[Key]error) {
	wanted := make(map[Key]Config, len(want))
	for _, c := range want {
		k := c.Key()
		c, err := c.withDefaults()
		if prev, dup := wanted[k]; err == nil && dup && prev != c {
			err = errors.New("wanted twice with different configurations")
		}
		if err != nil && errs[k] == nil {
			errs[k] = fmt.Errorf("bfd session %s: %w", k, err)
		}
		wanted[k] = c
	}
	for k := range errs { // failed Keys keep what they have
		delete(wanted, k)
	}
	for k, e := range m.sessions {
		if _, ok := wanted[k]; !ok && errs[k] == nil && e.removeAt.IsZero() {
			m.remove(e, now)
		}
	}
	for k, cfg := range wanted {
		if err := m.apply(cfg, now); err != nil {
			errs[k] = fmt.Errorf("bfd session %s: %w", k, err)
		}
	}
}

// apply brings the session of cfg's Key to cfg.
func (m *Manager) apply(cfg Config, now time.Time) error {
	e := m.sessions[cfg.Key()]
	switch {
	case e == nil:
		return m.add(cfg, nil, now)
	case !e.removeAt.IsZero(): // wanted again while announcing AdminDown: start afresh
		return m.add(cfg, e, now)
	case e.cfg == cfg:
		return nil
	case e.cfg.Local == cfg.Local:
		e.cfg = cfg
		e.reconfigure(cfg.Timers)
		heap.Fix(&m.timers, e.index)
		return nil
	default:
		return m.add(cfg, e, now)
	}
}

// add starts a session for cfg in place of old (nil for none). The socket is opened before old
// is touched, so that a failure leaves old running.
func (m *Manager) add(cfg Config, old *entry, now time.Time) error {
	conn, err := m.dial(cfg)
	if err != nil {
		return err
	}
	if old != nil {
		if old.removeAt.IsZero() {
			m.afterChange(old, old.adminDown(now), now) // sends the AdminDown packet at once
		}
		m.delete(old)
	}
	peer := cfg.Peer
	if cfg.Interface != "" && peer.Is6() && peer.IsLinkLocalUnicast() {
		peer = peer.WithZone(cfg.Interface)
	}
	e := &entry{cfg: cfg, conn: conn, dst: netip.AddrPortFrom(peer, ControlPort)}
	e.session = newSession(cfg.Key(), cfg.Timers, m.discriminator(), now, m.rnd.Float64)
	m.sessions[e.key] = e
	m.byDisc[e.localDisc] = e
	heap.Push(&m.timers, e)
	return nil
}

// remove starts the removal of a session: it announces AdminDown for a detection time, then
// fire deletes it.
func (m *Manager) remove(e *entry, now time.Time) {
	m.afterChange(e, e.adminDown(now), now)
}

func (m *Manager) delete(e *entry) {
	if e.index >= 0 {
		heap.Remove(&m.timers, e.index)
	}
	delete(m.sessions, e.key)
	delete(m.byDisc, e.localDisc)
	e.conn.Close()
}

// discriminator picks a random, unused, non-zero local discriminator.
func (m *Manager) discriminator() uint32 {
	for {
		d := m.rnd.Uint32()
		if d != 0 && m.byDisc[d] == nil {
			return d
		}
	}
}
