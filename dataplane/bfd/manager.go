package bfd

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/vishvananda/netns"

	"github.com/egressd/egressd/internal/nsthread"
)

// Config of one session.
type Config struct {
	Peer netip.Addr
	// Local is the source address; optional when Interface is set.
	Local netip.Addr
	// Interface binds the session to a link (required for link-local peers).
	Interface string
	// Timers; zero fields take DefaultTimers.
	Timers Timers
}

// Key of the session this Config describes.
func (c Config) Key() Key { return Key{Peer: c.Peer, Interface: c.Interface} }

func (c Config) withDefaults() (Config, error) {
	if !c.Peer.IsValid() {
		return c, errors.New("peer address required")
	}
	if c.Local.IsValid() && c.Local.Is4() != c.Peer.Is4() {
		return c, fmt.Errorf("local %s and peer %s are of different IP families", c.Local, c.Peer)
	}
	if c.Peer.Is6() && c.Peer.IsLinkLocalUnicast() && c.Interface == "" {
		return c, fmt.Errorf("link-local peer %s needs an interface", c.Peer)
	}
	if c.Timers.DesiredMinTx == 0 {
		c.Timers.DesiredMinTx = DefaultTimers.DesiredMinTx
	}
	if c.Timers.RequiredMinRx == 0 {
		c.Timers.RequiredMinRx = DefaultTimers.RequiredMinRx
	}
	if c.Timers.DetectMult == 0 {
		c.Timers.DetectMult = DefaultTimers.DetectMult
	}
	if c.Timers.DesiredMinTx < MinInterval || c.Timers.RequiredMinRx < MinInterval {
		return c, fmt.Errorf("timers %s/%s below the minimum %s", c.Timers.DesiredMinTx, c.Timers.RequiredMinRx, MinInterval)
	}
	return c, nil
}

// SessionInfo is a snapshot of one session.
type SessionInfo struct {
	Key                   Key
	Local                 netip.Addr
	State, RemoteState    State
	Diag, RemoteDiag      Diag
	LocalDisc, RemoteDisc uint32
	Timers                Timers
	// TxInterval and DetectionTime as negotiated with the peer.
	TxInterval, DetectionTime time.Duration
	LastChange, LastReceived  time.Time
	Counters                  Counters
}

// Manager runs BFD sessions in the network namespace it was created in.
type Manager struct {
	log *slog.Logger

	cmds chan func()
	rx   chan received
	done chan struct{}
	wg   sync.WaitGroup

	// dropped counts discarded packets by cause. Atomic, so that the reader goroutines count
	// without waiting for the event loop.
	dropped [numDropCauses]atomic.Uint64
	// dial opens a session's send socket; replaced in tests so that no packet leaves.
	dial func(Config) (sendConn, error)

	// Owned by the event loop goroutine.
	sessions map[Key]*entry
	byDisc   map[uint32]*entry
	timers   timerHeap
	subs     map[chan Transition]struct{}
	buf      gopacket.SerializeBuffer
	rxConns  []net.PacketConn
	// sendErrors counts failed sends (all sessions), for rate-limited logging.
	sendErrors uint64
	rnd        *mrand.Rand
}

// entry is a session with its send socket and heap position.
type entry struct {
	*session
	cfg   Config
	conn  sendConn
	dst   netip.AddrPort
	index int
}

var errClosed = errors.New("bfd: manager closed")

// New starts a Manager. Its sockets are opened in the network namespace of the calling thread
// (the process's, unless the caller locked its thread into another one), now and for every
// session added later.
func New(log *slog.Logger) (*Manager, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("bfd: current network namespace: %w", err)
	}
	m := newManager(log)
	started := make(chan error, 1)
	m.wg.Add(1)
	go m.loop(ns, started)
	if err := <-started; err != nil {
		m.wg.Wait()
		return nil, err
	}
	return m, nil
}

// newManager returns a Manager whose event loop is not running yet.
func newManager(log *slog.Logger) *Manager {
	seed := make([]byte, 16)
	_, _ = rand.Read(seed)
	m := &Manager{
		log:      log,
		cmds:     make(chan func()),
		rx:       make(chan received, 256),
		done:     make(chan struct{}),
		sessions: map[Key]*entry{},
		byDisc:   map[uint32]*entry{},
		subs:     map[chan Transition]struct{}{},
		buf:      gopacket.NewSerializeBuffer(),
		rnd:      mrand.New(mrand.NewPCG(binary.LittleEndian.Uint64(seed), binary.LittleEndian.Uint64(seed[8:]))),
	}
	m.dial = func(cfg Config) (sendConn, error) {
		c, err := m.dialUDP(cfg)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return c, nil
	}
	return m
}

// loop stays locked to a thread in the Manager's namespace so that sockets of later sessions
// open there too.
func (m *Manager) loop(ns netns.NsHandle, started chan<- error) {
	defer m.wg.Done()
	err := nsthread.Lock(ns)
	ns.Close()
	if err == nil {
		err = m.listen()
	}
	started <- err
	if err != nil {
		return
	}
	m.run()
}

// run is the event loop: it owns all session state.
func (m *Manager) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(m.untilNext())
		select {
		case <-m.done:
			m.shutdown()
			return
		case f := <-m.cmds:
			f()
		case r := <-m.rx:
			m.handle(&r)
		case <-timer.C:
			m.fire(time.Now())
		}
	}
}

// do runs f on the event loop and waits for it; false if the Manager is closed.
func (m *Manager) do(f func()) bool {
	done := make(chan struct{})
	select {
	case m.cmds <- func() { f(); close(done) }:
		<-done
		return true
	case <-m.done:
		return false
	}
}

// Subscribe returns a channel of state changes. Changes are hints for a level-triggered
// consumer: if it falls far behind, some are dropped; Sessions always has the current state.
func (m *Manager) Subscribe() (<-chan Transition, func()) {
	ch := make(chan Transition, 256)
	m.do(func() { m.subs[ch] = struct{}{} })
	return ch, func() { m.do(func() { delete(m.subs, ch) }) }
}

// Sessions returns a snapshot of every session, including removed ones still announcing
// AdminDown.
func (m *Manager) Sessions() []SessionInfo {
	var out []SessionInfo
	m.do(func() {
		for _, e := range m.sessions {
			out = append(out, SessionInfo{
				Key: e.key, Local: e.cfg.Local, State: e.state, RemoteState: e.remoteState,
				Diag: e.localDiag, RemoteDiag: e.remoteDiag, LocalDisc: e.localDisc, RemoteDisc: e.remoteDisc,
				Timers: e.timers, TxInterval: e.txInterval(), DetectionTime: e.detectionTime(),
				LastChange: e.lastChange, LastReceived: e.lastReceived, Counters: e.counters,
			})
		}
	})
	return out
}

// Close stops every session without announcing anything (the process is going away; peers
// detect it, or a restarted agent brings the sessions back before they do).
func (m *Manager) Close() {
	select {
	case <-m.done:
	default:
		close(m.done)
	}
	m.wg.Wait()
}

func (m *Manager) shutdown() {
	for _, c := range m.rxConns {
		c.Close()
	}
	for _, e := range m.sessions {
		e.conn.Close()
	}
}
