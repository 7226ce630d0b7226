package bfd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// ControlPort is the UDP destination port of single-hop BFD control packets (RFC 5881).
const ControlPort = 3784

// Source ports of control packets (RFC 5881 section 4).
const minSrcPort, maxSrcPort = 49152, 65535

// sendConn is a session's send socket (*net.UDPConn).
type sendConn interface {
	WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error)
	Close() error
}

type received struct {
	pkt     layers.BFD
	src     netip.Addr
	dst     netip.Addr
	ifIndex int
	at      time.Time
}

// dropCause is why a received packet was discarded: the "reason" label of the metric.
type dropCause uint8

const (
	dropNone dropCause = iota
	dropTTL
	dropMalformed
	dropVersion
	dropAuth
	dropDetectMult
	dropMultipoint
	dropMyDisc
	dropYourDisc
	dropNoSession
	numDropCauses
)

var dropNames = [numDropCauses]string{"", "ttl", "malformed", "version", "auth", "detect_mult",
	"multipoint", "my_discriminator", "your_discriminator", "no_session"}

func (c dropCause) String() string { return dropNames[c] }

// drop counts a discarded packet. It never waits for the event loop: a flood of bad packets
// must not slow the readers down, nor the loop by queueing behind good ones.
func (m *Manager) drop(c dropCause) { m.dropped[c].Add(1) }

// dropCounts returns the number of received packets discarded, by reason (every reason, zero
// included); safe from any goroutine.
func (m *Manager) dropCounts() map[string]uint64 {
	out := make(map[string]uint64, numDropCauses-1)
	for c := dropNone + 1; c < numDropCauses; c++ {
		out[c.String()] = m.dropped[c].Load()
	}
	return out
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
			m.drop(dropTTL)
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
			m.drop(dropTTL)
			continue
		}
		m.deliver(buf[:n], src, cm.Dst, cm.IfIndex)
	}
}

// deliver decodes and validates in the reader goroutine, and hands valid packets to the loop.
func (m *Manager) deliver(b []byte, src net.Addr, dst net.IP, ifIndex int) {
	r := received{ifIndex: ifIndex, at: time.Now()}
	if err := r.pkt.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
		m.drop(dropMalformed)
		return
	}
	if c := dropReason(&r.pkt); c != dropNone {
		m.drop(c)
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
		m.drop(dropNoSession)
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

// dialUDP opens the session's send socket: TTL/hop limit 255, bound to the interface and local
// address, from a free source port in 49152-65535 unique to this session.
func (m *Manager) dialUDP(cfg Config) (*net.UDPConn, error) {
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
