package bfd

import (
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netns"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// ControlPort is the UDP destination port of single-hop BFD control packets (RFC 5881).
const ControlPort = 3784

// Source ports of control packets (RFC 5881 section 4).
const minSrcPort, maxSrcPort = 49152, 65535

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

	// Owned by the event loop goroutine.
	sessions map[Key]*entry
	byDisc   map[uint32]*entry
	timers   timerHeap
	subs     map[chan Transition]struct{}
	buf      gopacket.SerializeBuffer
	rxConns  []net.PacketConn
	dropped  map[string]uint64
	// sendErrors counts failed sends (all sessions), for rate-limited logging.
	sendErrors uint64
	rnd        *mrand.Rand
}

// entry is a session with its send socket and heap position.
type entry struct {
	*session
	cfg   Config
	conn  *net.UDPConn
	dst   netip.AddrPort
	index int
}

type received struct {
	pkt     layers.BFD
	src     netip.Addr
	dst     netip.Addr
	ifIndex int
	at      time.Time
}

// New starts a Manager. Its sockets are opened in the network namespace of the calling thread
// (the process's, unless the caller locked its thread into another one), now and for every
// session added later.
func New(log *slog.Logger) (*Manager, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("bfd: current network namespace: %w", err)
	}
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
		dropped:  map[string]uint64{},
		rnd:      mrand.New(mrand.NewPCG(binary.LittleEndian.Uint64(seed), binary.LittleEndian.Uint64(seed[8:]))),
	}
	started := make(chan error, 1)
	m.wg.Add(1)
	go m.loop(ns, started)
	if err := <-started; err != nil {
		m.wg.Wait()
		return nil, err
	}
	return m, nil
}

// loop owns all session state. It stays locked to a thread in the Manager's namespace so that
// sockets of later sessions open there too.
func (m *Manager) loop(ns netns.NsHandle, started chan<- error) {
	defer m.wg.Done()
	runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
	err := netns.Set(ns)
	ns.Close()
	if err == nil {
		err = m.listen()
	}
	started <- err
	if err != nil {
		return
	}
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

// listen opens the shared receive sockets: one per IP family on UDP 3784.
func (m *Manager) listen() error {
	c4, err := net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", ControlPort))
	if err != nil {
		return fmt.Errorf("bfd: listen udp4 :%d: %w", ControlPort, err)
	}
	p4 := ipv4.NewPacketConn(c4)
	if err := p4.SetControlMessage(ipv4.FlagTTL|ipv4.FlagDst|ipv4.FlagInterface, true); err != nil {
		c4.Close()
		return fmt.Errorf("bfd: udp4 control messages: %w", err)
	}
	m.rxConns = append(m.rxConns, c4)
	m.wg.Add(1)
	go m.read4(p4)

	c6, err := net.ListenPacket("udp6", fmt.Sprintf("[::]:%d", ControlPort))
	if err != nil {
		m.log.Warn("no IPv6 BFD: cannot listen", "err", err)
		return nil
	}
	p6 := ipv6.NewPacketConn(c6)
	if err := p6.SetControlMessage(ipv6.FlagHopLimit|ipv6.FlagDst|ipv6.FlagInterface, true); err != nil {
		c6.Close()
		return fmt.Errorf("bfd: udp6 control messages: %w", err)
	}
	m.rxConns = append(m.rxConns, c6)
	m.wg.Add(1)
	go m.read6(p6)
	return nil
}

func (m *Manager) read4(c *ipv4.PacketConn) {
	defer m.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, cm, src, err := c.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		if cm == nil || cm.TTL != 255 {
			m.drop("ttl")
			continue
		}
		m.deliver(buf[:n], src, cm.Dst, cm.IfIndex)
	}
}

func (m *Manager) read6(c *ipv6.PacketConn) {
	defer m.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, cm, src, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		if cm == nil || cm.HopLimit != 255 {
			m.drop("ttl")
			continue
		}
		m.deliver(buf[:n], src, cm.Dst, cm.IfIndex)
	}
}

// deliver decodes and validates in the reader goroutine, and hands valid packets to the loop.
func (m *Manager) deliver(b []byte, src net.Addr, dst net.IP, ifIndex int) {
	r := received{ifIndex: ifIndex, at: time.Now()}
	if err := r.pkt.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
		m.drop("malformed")
		return
	}
	if reason := dropReason(&r.pkt); reason != "" {
		m.drop(reason)
		return
	}
	ua, ok := src.(*net.UDPAddr)
	if !ok {
		return
	}
	r.src = ua.AddrPort().Addr().Unmap()
	r.dst, _ = netip.AddrFromSlice(dst)
	r.dst = r.dst.Unmap()
	select {
	case m.rx <- r:
	case <-m.done:
	}
}

// drop counts a discarded packet; safe from any goroutine.
func (m *Manager) drop(reason string) {
	m.do(func() { m.dropped[reason]++ })
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

// handle demultiplexes a packet to its session (RFC 5880 section 6.8.6).
func (m *Manager) handle(r *received) {
	var e *entry
	if your := uint32(r.pkt.YourDiscriminator); your != 0 {
		e = m.byDisc[your]
	} else {
		for _, c := range m.sessions {
			if c.cfg.Peer == r.src && (!c.cfg.Local.IsValid() || c.cfg.Local == r.dst) && c.ifIndexMatches(r.ifIndex) {
				e = c
				break
			}
		}
	}
	if e == nil || e.cfg.Peer != r.src {
		m.dropped["no_session"]++
		return
	}
	tr := e.receive(&r.pkt, r.at)
	if e.owesFinal {
		e.owesFinal = false
		m.send(e, true)
	}
	m.afterChange(e, tr, r.at)
}

func (e *entry) ifIndexMatches(ifIndex int) bool {
	if e.cfg.Interface == "" {
		return true
	}
	ifi, err := net.InterfaceByName(e.cfg.Interface)
	return err == nil && ifi.Index == ifIndex
}

// fire handles every session whose time has come.
func (m *Manager) fire(now time.Time) {
	for len(m.timers) > 0 && !m.timers[0].next().After(now) {
		e := m.timers[0]
		if !e.removeAt.IsZero() && !now.Before(e.removeAt) {
			m.delete(e)
			continue
		}
		tr := e.expire(now)
		if tr == nil && e.shouldSendPeriodic(now) {
			m.send(e, false)
		}
		m.afterChange(e, tr, now)
	}
}

// afterChange publishes a transition, sends the packet announcing it, and re-sorts the heap.
func (m *Manager) afterChange(e *entry, tr *Transition, now time.Time) {
	if tr != nil {
		m.log.Info("bfd session state changed", "peer", e.key.String(), "from", tr.From.String(), "to", tr.To.String(),
			"diag", tr.Diag.String(), "remoteDiag", tr.RemoteDiag.String())
		for ch := range m.subs {
			select {
			case ch <- *tr:
			default:
				m.log.Warn("bfd subscriber is not keeping up; Sessions() has the current state", "peer", e.key.String())
			}
		}
		if e.shouldSendPeriodic(now) {
			m.send(e, false)
		}
	}
	if e.index >= 0 {
		heap.Fix(&m.timers, e.index)
	}
}

func (m *Manager) send(e *entry, final bool) {
	p := e.packet(final)
	if err := m.buf.Clear(); err != nil {
		return
	}
	if err := p.SerializeTo(m.buf, gopacket.SerializeOptions{}); err != nil {
		m.log.Error("bfd: encode", "peer", e.key.String(), "err", err)
		return
	}
	if _, err := e.conn.WriteToUDPAddrPort(m.buf.Bytes(), e.dst); err != nil {
		m.sendErrors++
		if m.sendErrors&(m.sendErrors-1) == 0 { // 1st, 2nd, 4th, 8th...: visible, not a flood
			m.log.Warn("bfd: send failed", "peer", e.key.String(), "err", err, "failures", m.sendErrors)
		}
		return
	}
	e.counters.PacketsSent++
}

func (m *Manager) untilNext() time.Duration {
	if len(m.timers) == 0 {
		return time.Hour
	}
	return max(time.Until(m.timers[0].next()), 0)
}

// Add starts a session, or changes the timers of an existing one (with a Poll Sequence).
func (m *Manager) Add(cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return fmt.Errorf("bfd session %s: %w", cfg.Key(), err)
	}
	var result error
	ok := m.do(func() {
		now := time.Now()
		if e := m.sessions[cfg.Key()]; e != nil && e.removeAt.IsZero() {
			if e.cfg.Local != cfg.Local {
				result = fmt.Errorf("bfd session %s: local address %s is in use; remove the session first", cfg.Key(), e.cfg.Local)
				return
			}
			e.cfg = cfg
			e.reconfigure(cfg.Timers)
			heap.Fix(&m.timers, e.index)
			return
		} else if e != nil {
			m.delete(e) // re-added while announcing AdminDown: start afresh
		}
		conn, err := m.dial(cfg)
		if err != nil {
			result = fmt.Errorf("bfd session %s: %w", cfg.Key(), err)
			return
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
	})
	if !ok {
		return errors.New("bfd: manager closed")
	}
	return result
}

// Remove stops a session; it announces AdminDown to the peer for a detection time first.
func (m *Manager) Remove(key Key) {
	m.do(func() {
		e := m.sessions[key]
		if e == nil || !e.removeAt.IsZero() {
			return
		}
		now := time.Now()
		m.afterChange(e, e.adminDown(now), now)
	})
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

// dial opens the session's send socket: TTL/hop limit 255, bound to the interface and local
// address, from a free source port in 49152-65535 unique to this session.
func (m *Manager) dial(cfg Config) (*net.UDPConn, error) {
	network := "udp4"
	if cfg.Peer.Is6() {
		network = "udp6"
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if cfg.Peer.Is4() {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL, 255)
			} else {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, 255)
			}
			if serr == nil && cfg.Interface != "" {
				serr = unix.BindToDevice(int(fd), cfg.Interface)
			}
		})
		return errors.Join(err, serr)
	}}
	local := ""
	if cfg.Local.IsValid() {
		local = cfg.Local.String()
		if cfg.Local.Is6() && cfg.Local.IsLinkLocalUnicast() {
			local += "%" + cfg.Interface
		}
	}
	var lastErr error
	for range 64 {
		port := minSrcPort + m.rnd.IntN(maxSrcPort-minSrcPort+1)
		c, err := lc.ListenPacket(context.Background(), network, net.JoinHostPort(local, fmt.Sprint(port)))
		if err == nil {
			return c.(*net.UDPConn), nil
		}
		lastErr = err
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, fmt.Errorf("open send socket: %w", lastErr)
}

// Subscribe returns a channel of state changes. Changes are hints for a level-triggered
// consumer: if it falls far behind, some are dropped; Sessions always has the current state.
func (m *Manager) Subscribe() (<-chan Transition, func()) {
	ch := make(chan Transition, 256)
	m.do(func() { m.subs[ch] = struct{}{} })
	return ch, func() { m.do(func() { delete(m.subs, ch) }) }
}

// Sessions returns a snapshot of every session.
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

// Dropped returns the number of received packets discarded, by reason.
func (m *Manager) Dropped() map[string]uint64 {
	out := map[string]uint64{}
	m.do(func() {
		for k, v := range m.dropped {
			out[k] = v
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

// timerHeap orders sessions by the time they next need attention.
type timerHeap []*entry

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].next().Before(h[j].next()) }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *timerHeap) Push(x any)        { e := x.(*entry); e.index = len(*h); *h = append(*h, e) }
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	e.index = -1
	return e
}
