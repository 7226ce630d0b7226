package lab

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// Serve runs the observing TCP and UDP servers in the pod (for pod-to-pod checks).
func (p *Pod) Serve(ports ...uint16) error {
	p.obs = newObserver(p.Namespace + "/" + p.Name)
	p.Node.lab.onClose(p.obs.close)
	return p.obs.start(p.NS, []netip.Addr{p.IPv4, p.IPv6}, ports)
}

// TCP connects from the pod to dst ("ip:port", v6 as "[ip]:port") and returns what the server saw.
func (p *Pod) TCP(dst string, o ...ClientOptions) Result { return call(p.NS, "tcp", dst, first(o)) }

// UDP sends a datagram from the pod to dst and returns what the server saw.
func (p *Pod) UDP(dst string, o ...ClientOptions) Result { return call(p.NS, "udp", dst, first(o)) }

// SCTP sends an SCTP INIT from the pod to dst on a raw socket (kernels without an SCTP stack can
// still send it, and the firewall judges the packet, not an association) and reports whether
// the external host saw it arrive within timeout. Each call uses a fresh source port.
func (p *Pod) SCTP(to *External, dst netip.AddrPort, timeout time.Duration) (bool, error) {
	_, ok, err := p.SCTPSeen(to, dst, dst.Port(), timeout)
	return ok, err
}

// SCTPSeen is SCTP for a packet that may arrive at another port (after DNAT): it returns what
// the external host saw of it (its source after NAT) when it arrived at port within timeout.
func (p *Pod) SCTPSeen(to *External, dst netip.AddrPort, port uint16, timeout time.Duration) (Observation, bool, error) {
	return p.sctpFrom(to, netip.Addr{}, dst, port, timeout)
}

// SpoofedSCTP is SCTP with a forged source address, as a pod with NET_RAW can send: it reports
// whether the external host saw the packet arrive within timeout.
func (p *Pod) SpoofedSCTP(to *External, src netip.Addr, dst netip.AddrPort, timeout time.Duration) (bool, error) {
	_, ok, err := p.sctpFrom(to, src, dst, dst.Port(), timeout)
	return ok, err
}

// sctpFrom sends the SCTP INIT from src (the invalid address: the pod's own, as routed).
func (p *Pod) sctpFrom(to *External, src netip.Addr, dst netip.AddrPort, port uint16, timeout time.Duration) (Observation, bool, error) {
	sport := uint16(20000 + sctpPorts.Add(1)%40000)
	err := p.NS.Do(func() error {
		family, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Addr: dst.Addr().As16()})
		level, transparent := unix.SOL_IPV6, unix.IPV6_TRANSPARENT
		if dst.Addr().Is4() {
			family, sa = unix.AF_INET, &unix.SockaddrInet4{Addr: dst.Addr().As4()}
			level, transparent = unix.SOL_IP, unix.IP_TRANSPARENT
		}
		fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
		if err != nil {
			return fmt.Errorf("raw SCTP socket: %w", err)
		}
		defer unix.Close(fd)
		if src.IsValid() {
			// Transparent: the kernel sends from an address the pod does not hold.
			if err := unix.SetsockoptInt(fd, level, transparent, 1); err != nil {
				return fmt.Errorf("transparent socket: %w", err)
			}
			from := unix.Sockaddr(&unix.SockaddrInet6{Addr: src.As16()})
			if src.Is4() {
				from = &unix.SockaddrInet4{Addr: src.As4()}
			}
			if err := unix.Bind(fd, from); err != nil {
				return fmt.Errorf("bind to %s: %w", src, err)
			}
		}
		return unix.Sendto(fd, sctpInit(sport, dst.Port()), 0, sa)
	})
	if err != nil {
		return Observation{}, false, err
	}
	ob, ok := to.obs.seen("sctp", sport, port, timeout)
	return ob, ok, nil
}

var sctpPorts atomic.Uint32

// sctpInit is an SCTP packet holding one INIT chunk (RFC 9260 3.3.2), CRC32c included.
func sctpInit(sport, dport uint16) []byte {
	b := make([]byte, 12+20)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	chunk := b[12:]
	chunk[0] = 1                                  // INIT
	binary.BigEndian.PutUint16(chunk[2:], 20)     // chunk length
	binary.BigEndian.PutUint32(chunk[4:], 0x1234) // initiate tag
	binary.BigEndian.PutUint32(chunk[8:], 65536)  // a_rwnd
	binary.BigEndian.PutUint16(chunk[12:], 1)     // outbound streams
	binary.BigEndian.PutUint16(chunk[14:], 1)     // inbound streams
	binary.BigEndian.PutUint32(chunk[16:], 1)     // initial TSN
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// Ping sends one ICMP echo from the pod; nil if answered.
func (p *Pod) Ping(dst string) error {
	_, err := p.NS.Run("ping", "-c", "1", "-W", "2", dst)
	return err
}

func first(o []ClientOptions) ClientOptions {
	if len(o) > 0 {
		return o[0]
	}
	return ClientOptions{}
}

// StreamResult is what UDPStream saw: how many datagrams it sent, how many were answered, and the
// sequence numbers (0 to n-1, one per interval) of those that were not.
type StreamResult struct {
	Sent, Answered int
	Unanswered     []int
}

// Lost says whether a datagram of the n the stream should have sent went unanswered.
func (s StreamResult) Lost(n int) bool { return s.Sent != n || s.Answered != s.Sent }

// String reads "293 of 300 answered, unanswered 101-107", the ranges telling when the loss was.
func (s StreamResult) String() string {
	out := fmt.Sprintf("%d of %d answered", s.Answered, s.Sent)
	for i := 0; i < len(s.Unanswered); {
		j := i
		for j+1 < len(s.Unanswered) && s.Unanswered[j+1] == s.Unanswered[j]+1 {
			j++
		}
		sep := ", "
		if i == 0 {
			sep = ", unanswered "
		}
		if out += sep + strconv.Itoa(s.Unanswered[i]); j > i {
			out += "-" + strconv.Itoa(s.Unanswered[j])
		}
		i = j + 1
	}
	return out
}

// UDPStream sends n datagrams from the pod to dst, one every interval, each carrying its
// sequence number, and matches the servers' answers (each datagram is answered, echoing it):
// a packet lost either way shows in Unanswered.
func (p *Pod) UDPStream(dst string, n int, interval time.Duration) (StreamResult, error) {
	var conn net.Conn
	if err := p.NS.Do(func() error {
		var err error
		conn, err = net.Dial("udp", dst)
		return err
	}); err != nil {
		return StreamResult{}, err
	}
	defer conn.Close()
	done := make(chan []bool)
	go func() {
		buf := make([]byte, 2048)
		answered := make([]bool, n)
		for got := 0; got < n; {
			_ = conn.SetReadDeadline(time.Now().Add(time.Duration(n)*interval + 2*time.Second))
			m, err := conn.Read(buf)
			if err != nil {
				if errors.Is(err, syscall.ECONNREFUSED) {
					continue // an ICMP error for one datagram; keep counting the others
				}
				break // the deadline: nothing more is coming
			}
			var ob Observation
			if json.Unmarshal(buf[:m], &ob) != nil {
				continue
			}
			if seq, err := strconv.Atoi(ob.Echo); err == nil && seq >= 0 && seq < n && !answered[seq] {
				answered[seq] = true
				got++
			}
		}
		done <- answered
	}()
	var s StreamResult
	t := time.NewTicker(interval)
	defer t.Stop()
	for i := range n {
		if _, err := conn.Write([]byte(fmt.Sprintf("%d\n", i))); err == nil {
			s.Sent++
		}
		<-t.C
	}
	for i, ok := range <-done {
		if ok {
			s.Answered++
		} else {
			s.Unanswered = append(s.Unanswered, i)
		}
	}
	return s, nil
}

// FloodUDP sends 64-byte datagrams from the pod to dst (IPv4 "ip:port") as fast as it can for
// d, in batches of 64 per system call (sendmmsg), and returns how many it sent.
func (p *Pod) FloodUDP(dst string, d time.Duration) (uint64, error) {
	to, err := net.ResolveUDPAddr("udp4", dst)
	if err != nil {
		return 0, err
	}
	var conn *net.UDPConn
	if err := p.NS.Do(func() error {
		var err error
		conn, err = net.ListenUDP("udp4", nil)
		return err
	}); err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetWriteBuffer(8 << 20)
	pc := ipv4.NewPacketConn(conn)
	payload := make([]byte, 64-28) // 64 bytes with the IPv4 and UDP headers
	batch := make([]ipv4.Message, 64)
	for i := range batch {
		batch[i] = ipv4.Message{Buffers: [][]byte{payload}, Addr: to}
	}
	var sent uint64
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		n, err := pc.WriteBatch(batch, 0)
		if err != nil && !errors.Is(err, syscall.ENOBUFS) {
			return sent, err
		}
		sent += uint64(n)
	}
	return sent, nil
}

// Stream is a UDP stream from a pod (see StreamUDP).
type Stream struct {
	conn     net.Conn
	stop     chan struct{}
	done     chan struct{}
	sent     atomic.Int64
	answered atomic.Int64
}

// StreamUDP sends a datagram from one socket of the pod (one flow: one source port) to dst
// every interval until Stop, counting the servers' answers.
func (p *Pod) StreamUDP(dst string, every time.Duration) (*Stream, error) {
	s := &Stream{stop: make(chan struct{}), done: make(chan struct{})}
	if err := p.NS.Do(func() error {
		var err error
		s.conn, err = net.Dial("udp", dst)
		return err
	}); err != nil {
		return nil, err
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, err := s.conn.Read(buf); err != nil {
				if errors.Is(err, syscall.ECONNREFUSED) {
					continue
				}
				return // closed by Stop
			}
			s.answered.Add(1)
		}
	}()
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for i := 0; ; i++ {
			if _, err := s.conn.Write([]byte(fmt.Sprintf("%d\n", i))); err == nil {
				s.sent.Add(1)
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s, nil
}

// Counts are the datagrams sent and answered so far.
func (s *Stream) Counts() (sent, answered int64) { return s.sent.Load(), s.answered.Load() }

// Stop ends the stream (answers in flight are not awaited) and returns the counts.
func (s *Stream) Stop() (sent, answered int64) {
	select {
	case <-s.stop:
	default:
		close(s.stop)
		<-s.done
		time.Sleep(100 * time.Millisecond) // the last answers
		s.conn.Close()
	}
	return s.Counts()
}

// LocalPort is the stream's source port in the pod (SNAT keeps it unless it collides).
func (s *Stream) LocalPort() uint16 { return uint16(s.conn.LocalAddr().(*net.UDPAddr).Port) }
