package bfd

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// fakeConn records what a session sends: unit tests open no socket and send nothing.
type fakeConn struct {
	mu     sync.Mutex
	sent   []layers.BFD
	closed bool
}

func (c *fakeConn) WriteToUDPAddrPort(b []byte, _ netip.AddrPort) (int, error) {
	var p layers.BFD
	if err := p.DecodeFromBytes(append([]byte(nil), b...), gopacket.NilDecodeFeedback); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	c.sent = append(c.sent, p)
	return len(b), nil
}

func (c *fakeConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

func (c *fakeConn) packets() []layers.BFD {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]layers.BFD(nil), c.sent...)
}

func (c *fakeConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// fakeNet is the dialer of a test Manager.
type fakeNet struct {
	mu    sync.Mutex
	conns map[Key][]*fakeConn // every socket opened, per Key, oldest first
	fail  map[Key]error
}

func (n *fakeNet) dial(cfg Config) (sendConn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.fail[cfg.Key()]; err != nil {
		return nil, err
	}
	c := &fakeConn{}
	n.conns[cfg.Key()] = append(n.conns[cfg.Key()], c)
	return c, nil
}

func (n *fakeNet) opened(k Key) []*fakeConn {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*fakeConn(nil), n.conns[k]...)
}

func (n *fakeNet) setFail(k Key, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fail[k] = err
}

// startTestManager runs a Manager's event loop on fake sockets, in no particular namespace.
func startTestManager(t *testing.T) (*Manager, *fakeNet) {
	t.Helper()
	m := newManager(slog.New(slog.NewTextHandler(io.Discard, nil)))
	n := &fakeNet{conns: map[Key][]*fakeConn{}, fail: map[Key]error{}}
	m.dial = n.dial
	m.wg.Add(1)
	go func() { defer m.wg.Done(); m.run() }()
	t.Cleanup(m.Close)
	return m, n
}

// inject hands the event loop a packet from cfg's peer, as a reader goroutine does.
func inject(m *Manager, cfg Config, p pk) {
	m.rx <- received{pkt: *p.bfd(), src: cfg.Peer, dst: cfg.Local, at: time.Now()}
}

func sessionsByKey(m *Manager) map[Key]SessionInfo {
	out := map[Key]SessionInfo{}
	for _, s := range m.Sessions() {
		out[s.Key] = s
	}
	return out
}

// settled, in a synctest bubble, fails the test unless cond holds once the event loop is
// durably blocked (it has handled every packet and command handed to it, and the fake clock
// has not moved).
func settled(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	synctest.Wait()
	if !cond() {
		t.Fatalf(format, args...)
	}
}

// bringUp makes cfg's session Up with a peer that sends every second and asks for packets at
// up to 50 ms, with multiplier mult; it ends the Poll Sequence that coming Up starts. In a
// synctest bubble.
func bringUp(t *testing.T, m *Manager, cfg Config, mult uint8) SessionInfo {
	t.Helper()
	disc := sessionsByKey(m)[cfg.Key()].LocalDisc
	inject(m, cfg, pk{state: Init, your: disc, tx: time.Second, rx: 50 * ms, mult: mult})
	inject(m, cfg, pk{state: Up, your: disc, tx: time.Second, rx: 50 * ms, mult: mult, final: true})
	settled(t, func() bool { return sessionsByKey(m)[cfg.Key()].State == Up }, "%s not Up", cfg.Key())
	return sessionsByKey(m)[cfg.Key()]
}

var (
	peerA = netip.MustParseAddr("192.0.2.1")
	peerB = netip.MustParseAddr("192.0.2.2")
	local = netip.MustParseAddr("192.0.2.100")
)

// Sessions on the bubble's fake clock: what the event loop does at once is checked when it is
// durably blocked, and a removal's announcement ends on the clock, not within a wall-clock wait.
func TestSyncAddsRemovesAndLeavesUnchangedAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, n := startTestManager(t)
		a := Config{Peer: peerA, Local: local}
		b := Config{Peer: peerB, Local: local, Timers: Timers{DesiredMinTx: 200 * ms}} // other fields default
		if errs := m.Sync([]Config{a, b}); len(errs) != 0 {
			t.Fatal(errs)
		}
		s := sessionsByKey(m)
		if len(s) != 2 || s[a.Key()].State != Down || s[b.Key()].State != Down || s[a.Key()].LocalDisc == s[b.Key()].LocalDisc {
			t.Fatalf("after adding: %+v", s)
		}
		if got := s[b.Key()].Timers; got != (Timers{200 * ms, 300 * ms, 3}) {
			t.Errorf("b's timers %+v, want the defaults filled in", got)
		}
		bringUp(t, m, a, 30)

		// Unchanged: nothing happens, however often it is asked.
		before := sessionsByKey(m)
		for range 3 {
			if errs := m.Sync([]Config{b, a}); len(errs) != 0 {
				t.Fatal(errs)
			}
		}
		after := sessionsByKey(m)
		for _, k := range []Key{a.Key(), b.Key()} {
			x, y := before[k], after[k]
			if x.LocalDisc != y.LocalDisc || x.RemoteDisc != y.RemoteDisc || x.State != y.State || x.LastChange != y.LastChange ||
				x.Timers != y.Timers || x.Counters.Transitions != y.Counters.Transitions || len(n.opened(k)) != 1 {
				t.Errorf("%s touched by an unchanged Sync:\n before %+v\n after  %+v\n sockets %d", k, x, y, len(n.opened(k)))
			}
		}

		// Removed: AdminDown is announced, then the session goes away with its socket.
		if errs := m.Sync([]Config{a}); len(errs) != 0 {
			t.Fatal(errs)
		}
		bc := n.opened(b.Key())[0]
		settled(t, func() bool {
			p := bc.packets()
			return len(p) > 0 && p[len(p)-1].State == layers.BFDStateAdminDown && p[len(p)-1].Diagnostic == layers.BFDDiagnosticAdminDown
		}, "no AdminDown sent for the removed session")
		removing := sessionsByKey(m)[b.Key()]
		if removing.State != AdminDown {
			t.Errorf("removed session in %s while announcing", removing.State)
		}
		// The announcement lasts a detection time: Detect Mult transmission intervals.
		announce := time.Duration(removing.Timers.DetectMult) * removing.TxInterval
		time.Sleep(announce - time.Millisecond) // the bubble's fake clock
		settled(t, func() bool { _, ok := sessionsByKey(m)[b.Key()]; return ok && !bc.isClosed() },
			"removed session gone before the end of its %s announcement", announce)
		time.Sleep(time.Millisecond)
		settled(t, func() bool { _, ok := sessionsByKey(m)[b.Key()]; return !ok && bc.isClosed() },
			"removed session still there after its %s announcement", announce)
		if s := sessionsByKey(m)[a.Key()]; s.State != Up || s.LocalDisc != before[a.Key()].LocalDisc {
			t.Errorf("a after removing b: %+v", s)
		}

		// Wanted again while announcing AdminDown: a fresh session.
		m.Sync(nil)
		if errs := m.Sync([]Config{a}); len(errs) != 0 {
			t.Fatal(errs)
		}
		s = sessionsByKey(m)
		if s[a.Key()].State != Down || s[a.Key()].LocalDisc == before[a.Key()].LocalDisc || !n.opened(a.Key())[0].isClosed() {
			t.Errorf("re-added during its removal: %+v", s[a.Key()])
		}
	})
}

// A timer change is applied in place with a Poll Sequence (RFC 5880 section 6.8.3): the Poll
// goes out with the next transmission (in a synctest bubble: within one interval of the fake
// clock).
func TestSyncTimerChangeIsAPollSequence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, n := startTestManager(t)
		a := Config{Peer: peerA, Local: local}
		if errs := m.Sync([]Config{a}); len(errs) != 0 {
			t.Fatal(errs)
		}
		// The peer sends every 50 ms with multiplier 30: our detection time is 30 x our Required Min RX.
		disc := sessionsByKey(m)[a.Key()].LocalDisc
		inject(m, a, pk{state: Init, your: disc, tx: 50 * ms, rx: 50 * ms, mult: 30})
		inject(m, a, pk{state: Up, your: disc, tx: 50 * ms, rx: 50 * ms, mult: 30, final: true})
		settled(t, func() bool { return sessionsByKey(m)[a.Key()].State == Up }, "not Up")
		before := sessionsByKey(m)[a.Key()]
		if before.TxInterval != 300*ms || before.DetectionTime != 9*time.Second {
			t.Fatalf("before: tx %s detect %s", before.TxInterval, before.DetectionTime)
		}
		conn := n.opened(a.Key())[0]
		sentBefore := len(conn.packets())

		a.Timers = Timers{DesiredMinTx: 100 * ms, RequiredMinRx: 100 * ms, DetectMult: 5}
		if errs := m.Sync([]Config{a}); len(errs) != 0 {
			t.Fatal(errs)
		}
		time.Sleep(before.TxInterval) // the bubble's fake clock: the next transmission, jittered, is due by then
		settled(t, func() bool {
			for _, p := range conn.packets()[sentBefore:] {
				if p.Poll && p.DesiredMinTxInterval == 100_000 && p.RequiredMinRxInterval == 100_000 && p.DetectMultiplier == 5 &&
					p.State == layers.BFDStateUp && uint32(p.MyDiscriminator) == disc {
					return true
				}
			}
			return false
		}, "no Poll with the new timers sent")
		s := sessionsByKey(m)[a.Key()]
		// Faster transmission applies at once; the shorter detection time waits for the Final.
		if s.TxInterval != 100*ms || s.DetectionTime != 9*time.Second {
			t.Errorf("during the Poll Sequence: tx %s detect %s, want 100ms / 9s", s.TxInterval, s.DetectionTime)
		}
		inject(m, a, pk{state: Up, your: disc, tx: 50 * ms, rx: 50 * ms, mult: 30, final: true})
		settled(t, func() bool { return sessionsByKey(m)[a.Key()].DetectionTime == 3*time.Second },
			"detection time %s after the Final, want 3s", sessionsByKey(m)[a.Key()].DetectionTime)
		s = sessionsByKey(m)[a.Key()]
		if s.State != Up || s.LocalDisc != disc || s.RemoteDisc != before.RemoteDisc ||
			s.Counters.Transitions != before.Counters.Transitions || len(n.opened(a.Key())) != 1 {
			t.Errorf("the timer change reset the session:\n before %+v\n after  %+v", before, s)
		}
		if s.Timers != a.Timers {
			t.Errorf("timers %+v, want %+v", s.Timers, a.Timers)
		}
	})
}

// A new local address is a new session to the peer: recreated, after one AdminDown packet.
func TestSyncNewLocalAddressRecreates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, n := startTestManager(t)
		a := Config{Peer: peerA, Local: local}
		if errs := m.Sync([]Config{a}); len(errs) != 0 {
			t.Fatal(errs)
		}
		old := bringUp(t, m, a, 30)
		moved := a
		moved.Local = netip.MustParseAddr("192.0.2.101")
		if errs := m.Sync([]Config{moved}); len(errs) != 0 {
			t.Fatal(errs)
		}
		s := sessionsByKey(m)[a.Key()]
		if s.Local != moved.Local || s.State != Down || s.LocalDisc == old.LocalDisc || len(n.opened(a.Key())) != 2 {
			t.Fatalf("after moving: %+v", s)
		}
		oldConn := n.opened(a.Key())[0]
		p := oldConn.packets()
		if last := p[len(p)-1]; last.State != layers.BFDStateAdminDown || uint32(last.MyDiscriminator) != old.LocalDisc || !oldConn.isClosed() {
			t.Errorf("old session's last packet %+v, closed %v", last, oldConn.isClosed())
		}
		// The old discriminator reaches nothing any more.
		inject(m, a, pk{state: Up, your: old.LocalDisc})
		settled(t, func() bool { return m.dropCounts()["no_session"] == 1 }, "packet for the old session not dropped")
	})
}

func TestSyncErrorsKeepWhatWorks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, n := startTestManager(t)
		a := Config{Peer: peerA, Local: local}
		if errs := m.Sync([]Config{a}); len(errs) != 0 {
			t.Fatal(errs)
		}
		old := bringUp(t, m, a, 30)

		noSocket := Config{Peer: netip.MustParseAddr("192.0.2.4")}
		errNoSocket := errors.New("no socket")
		n.setFail(noSocket.Key(), errNoSocket)
		linkLocal := Config{Peer: netip.MustParseAddr("fe80::1")}
		families := Config{Peer: netip.MustParseAddr("192.0.2.3"), Local: netip.MustParseAddr("2001:db8::1")}
		twice1 := Config{Peer: netip.MustParseAddr("192.0.2.5")}
		twice2 := Config{Peer: twice1.Peer, Timers: Timers{DetectMult: 5}}
		same := Config{Peer: netip.MustParseAddr("192.0.2.6")}
		aTooFast := a
		aTooFast.Timers.DesiredMinTx = 10 * ms

		errs := m.Sync([]Config{linkLocal, families, {}, noSocket, twice1, twice2, same, same, aTooFast})
		for _, k := range []Key{linkLocal.Key(), families.Key(), {}, noSocket.Key(), twice1.Key(), a.Key()} {
			if errs[k] == nil {
				t.Errorf("%s: no error", k)
			}
		}
		if len(errs) != 6 || !errors.Is(errs[noSocket.Key()], errNoSocket) {
			t.Errorf("errors: %v", errs)
		}
		s := sessionsByKey(m)
		if len(s) != 2 || s[same.Key()].State != Down {
			t.Errorf("sessions: %+v", s)
		}
		if x := s[a.Key()]; x.State != Up || x.LocalDisc != old.LocalDisc || x.Timers != DefaultTimers {
			t.Errorf("a failing update touched a working session: %+v", x)
		}

		// A new local address whose socket cannot be opened leaves the old session running.
		moved := a
		moved.Local = netip.MustParseAddr("192.0.2.101")
		n.setFail(a.Key(), errNoSocket)
		if errs := m.Sync([]Config{moved}); !errors.Is(errs[a.Key()], errNoSocket) {
			t.Errorf("moving without a socket: %v", errs)
		}
		if x := sessionsByKey(m)[a.Key()]; x.State != Up || x.LocalDisc != old.LocalDisc || x.Local != a.Local {
			t.Errorf("a failed move touched a working session: %+v", x)
		}
		n.setFail(a.Key(), nil)

		// The next Sync retries what failed.
		n.setFail(noSocket.Key(), nil)
		if errs := m.Sync([]Config{a, noSocket}); len(errs) != 0 {
			t.Fatal(errs)
		}
		if s := sessionsByKey(m)[noSocket.Key()]; s.State != Down {
			t.Errorf("retried session: %+v", s)
		}

		m.Close()
		if errs := m.Sync([]Config{a}); !errors.Is(errs[a.Key()], errClosed) {
			t.Errorf("after Close: %v", errs)
		}
	})
}
