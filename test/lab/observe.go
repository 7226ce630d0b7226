package lab

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/test/netns"
)

// Observation is what a lab server saw of one connection or datagram: the source as it arrived
// (after any SNAT), the DSCP and ECN bits of the IP header, and the MAC it came from.
type Observation struct {
	Host    string     `json:"host"`
	Proto   string     `json:"proto"`
	Src     netip.Addr `json:"src"`
	SrcPort uint16     `json:"srcPort"`
	Dst     netip.Addr `json:"dst"`
	DstPort uint16     `json:"dstPort"`
	DSCP    uint8      `json:"dscp"`
	ECN     uint8      `json:"ecn"`
	MAC     string     `json:"mac"`
	// Echo is the start of a datagram's payload, so that a client can tell its answers apart.
	Echo string `json:"echo,omitempty"`
}

type flowKey struct {
	proto   string
	src     netip.Addr
	srcPort uint16
	dstPort uint16
}

// observer sniffs a host's links (AF_PACKET) and serves TCP and UDP on ports, answering each
// connection or datagram with its Observation as one JSON line.
type observer struct {
	host  string
	mu    sync.Mutex
	cond  *sync.Cond
	flows map[flowKey]Observation
	socks []int
	lns   []net.Listener
	pcs   []net.PacketConn
	taps  map[*Capture]bool
}

func newObserver(host string) *observer {
	o := &observer{host: host, flows: map[flowKey]Observation{}}
	o.cond = sync.NewCond(&o.mu)
	return o
}

func htons(v uint16) uint16 { return binary.BigEndian.Uint16([]byte{byte(v), byte(v >> 8)}) }

// start opens, inside ns, a packet socket on every link and the servers; the goroutines that
// read them run anywhere (the sockets stay in ns). UDP is served per address, so that answers
// leave from the address that was asked (a wildcard socket would answer from the route's
// preferred source, which the client's conntrack entry does not match).
func (o *observer) start(ns *netns.NS, addrs []netip.Addr, ports []uint16) error {
	err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		o.socks = append(o.socks, fd)
		// A deep queue: the sniffer decodes in Go, under the race detector on a loaded
		// machine, behind bursts of a test's flows; the default (~200 KB, about a hundred
		// small frames on a veth) dropped a request now and then while its reply was seen.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20); err != nil {
			return fmt.Errorf("packet socket buffer: %w", err)
		}
		for _, p := range ports {
			ln, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
			if err != nil {
				return err
			}
			o.lns = append(o.lns, ln)
			for _, a := range addrs {
				pc, err := net.ListenPacket("udp", netip.AddrPortFrom(a, p).String())
				if err != nil {
					return err
				}
				o.pcs = append(o.pcs, pc)
			}
		}
		return nil
	})
	if err != nil {
		o.close()
		return err
	}
	for _, fd := range o.socks {
		go o.sniff(fd)
	}
	for _, ln := range o.lns {
		go o.serveTCP(ln)
	}
	for _, pc := range o.pcs {
		go o.serveUDP(pc)
	}
	return nil
}

func (o *observer) close() {
	for _, fd := range o.socks {
		unix.Close(fd)
	}
	for _, ln := range o.lns {
		ln.Close()
	}
	for _, pc := range o.pcs {
		pc.Close()
	}
	o.mu.Lock()
	o.cond.Broadcast()
	o.mu.Unlock()
}

func (o *observer) sniff(fd int) {
	buf := make([]byte, 65536)
	var eth layers.Ethernet
	var ip4 layers.IPv4
	var ip6 layers.IPv6
	var tcp layers.TCP
	var udp layers.UDP
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &ip6, &tcp, &udp)
	parser.IgnoreUnsupported = true
	decoded := make([]gopacket.LayerType, 0, 4)
	for {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		ll, ok := from.(*unix.SockaddrLinklayer)
		if !ok || ll.Pkttype != unix.PACKET_HOST && ll.Pkttype != unix.PACKET_OTHERHOST {
			continue // only what arrives for this host, or for another on its link (captures)
		}
		at := time.Now()
		if err := parser.DecodeLayers(buf[:n], &decoded); err != nil && len(decoded) < 3 {
			continue
		}
		ob := Observation{Host: o.host, MAC: eth.SrcMAC.String()}
		var tos uint8
		for _, l := range decoded {
			switch l {
			case layers.LayerTypeIPv4:
				ob.Src, _ = netip.AddrFromSlice(ip4.SrcIP.To4())
				ob.Dst, _ = netip.AddrFromSlice(ip4.DstIP.To4())
				tos = ip4.TOS
			case layers.LayerTypeIPv6:
				ob.Src, _ = netip.AddrFromSlice(ip6.SrcIP)
				ob.Dst, _ = netip.AddrFromSlice(ip6.DstIP)
				tos = ip6.TrafficClass
			case layers.LayerTypeTCP:
				ob.Proto, ob.SrcPort, ob.DstPort = "tcp", uint16(tcp.SrcPort), uint16(tcp.DstPort)
			case layers.LayerTypeUDP:
				ob.Proto, ob.SrcPort, ob.DstPort = "udp", uint16(udp.SrcPort), uint16(udp.DstPort)
			}
		}
		if ob.Proto == "" {
			// SCTP (gopacket cannot decode it in place): its ports lead the common header.
			var l4 []byte
			switch {
			case len(decoded) > 1 && decoded[1] == layers.LayerTypeIPv4 && ip4.Protocol == layers.IPProtocolSCTP:
				l4 = ip4.Payload
			case len(decoded) > 1 && decoded[1] == layers.LayerTypeIPv6 && ip6.NextHeader == layers.IPProtocolSCTP:
				l4 = ip6.Payload
			}
			if len(l4) < 12 {
				continue
			}
			ob.Proto, ob.SrcPort, ob.DstPort = "sctp", binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
		}
		ob.DSCP, ob.ECN = tos>>2, tos&3
		o.mu.Lock()
		for c := range o.taps {
			c.add(Captured{At: at, ForHost: ll.Pkttype == unix.PACKET_HOST, Observation: ob})
		}
		if ll.Pkttype == unix.PACKET_HOST {
			o.flows[flowKey{ob.Proto, ob.Src, ob.SrcPort, ob.DstPort}] = ob
			o.cond.Broadcast()
		}
		o.mu.Unlock()
	}
}

// lookup waits briefly for the sniffer to have seen the flow (it reads the same packet as the
// server, concurrently).
func (o *observer) lookup(k flowKey) (Observation, bool) {
	return o.await(time.Second, func() (Observation, bool) {
		ob, ok := o.flows[k]
		return ob, ok
	})
}

// seen waits up to timeout for a packet of proto between the ports, from any source address
// (the node may have masqueraded it).
func (o *observer) seen(proto string, srcPort, dstPort uint16, timeout time.Duration) (Observation, bool) {
	return o.await(timeout, func() (Observation, bool) {
		for k, ob := range o.flows {
			if k.proto == proto && k.srcPort == srcPort && k.dstPort == dstPort {
				return ob, true
			}
		}
		return Observation{}, false
	})
}

// await calls find, under the lock, whenever the sniffer records a packet, until it finds or
// timeout passes.
func (o *observer) await(timeout time.Duration, find func() (Observation, bool)) (Observation, bool) {
	deadline := time.Now().Add(timeout)
	o.mu.Lock()
	defer o.mu.Unlock()
	for {
		if ob, ok := find(); ok {
			return ob, true
		}
		if time.Now().After(deadline) {
			return Observation{}, false
		}
		t := time.AfterFunc(50*time.Millisecond, func() { o.mu.Lock(); o.cond.Broadcast(); o.mu.Unlock() })
		o.cond.Wait()
		t.Stop()
	}
}

func (o *observer) serveTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			ra := c.RemoteAddr().(*net.TCPAddr).AddrPort()
			la := c.LocalAddr().(*net.TCPAddr).AddrPort()
			ob, ok := o.lookup(flowKey{"tcp", ra.Addr().Unmap(), ra.Port(), la.Port()})
			if !ok { // still answer: the address is what the socket saw
				ob = Observation{Host: o.host, Proto: "tcp", Src: ra.Addr().Unmap(), SrcPort: ra.Port(), Dst: la.Addr().Unmap(), DstPort: la.Port()}
			}
			_ = json.NewEncoder(c).Encode(ob)
		}()
	}
}

func (o *observer) serveUDP(pc net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		ra := from.(*net.UDPAddr).AddrPort()
		port := uint16(pc.LocalAddr().(*net.UDPAddr).Port)
		ob, ok := o.lookup(flowKey{"udp", ra.Addr().Unmap(), ra.Port(), port})
		if !ok {
			ob = Observation{Host: o.host, Proto: "udp", Src: ra.Addr().Unmap(), SrcPort: ra.Port(), DstPort: port}
		}
		ob.Echo = strings.TrimSpace(string(buf[:min(n, 32)]))
		b, _ := json.Marshal(ob)
		_, _ = pc.WriteTo(append(b, '\n'), from)
	}
}

// Outcome of a connection attempt.
type Outcome string

// Outcomes a test asserts on.
const (
	OK          Outcome = "ok"
	Refused     Outcome = "refused"
	Timeout     Outcome = "timeout"
	Unreachable Outcome = "unreachable"
)

// Result of a client call: the outcome and, when OK, what the server saw.
type Result struct {
	Outcome Outcome
	Seen    Observation
	Err     error
}

func (r Result) String() string {
	if r.Outcome == OK {
		return fmt.Sprintf("ok (server %s saw %s:%d dscp %d)", r.Seen.Host, r.Seen.Src, r.Seen.SrcPort, r.Seen.DSCP)
	}
	return fmt.Sprintf("%s (%v)", r.Outcome, r.Err)
}

// ClientOptions of a TCP or UDP call.
type ClientOptions struct {
	// TOS is the whole IPv4 TOS / IPv6 traffic class byte the sender sets (DSCP<<2 | ECN).
	TOS     int
	Timeout time.Duration
}

func classify(err error) Outcome {
	var ne net.Error
	switch {
	case errors.Is(err, unix.ECONNREFUSED):
		return Refused
	case errors.Is(err, unix.EHOSTUNREACH), errors.Is(err, unix.ENETUNREACH), errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return Unreachable
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return Timeout
	}
	return Unreachable
}

func dialer(opt ClientOptions, v6 bool) *net.Dialer {
	d := &net.Dialer{Timeout: opt.Timeout}
	if opt.TOS != 0 {
		d.ControlContext = func(_ context.Context, _, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				if v6 {
					serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS, opt.TOS)
				} else {
					serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, opt.TOS)
				}
			})
			return errors.Join(err, serr)
		}
	}
	return d
}

// call connects from inside ns to dst ("ip:port") over TCP or UDP and reads the server's
// observation.
func call(ns *netns.NS, proto, dst string, opt ClientOptions) Result {
	if opt.Timeout == 0 {
		opt.Timeout = 2 * time.Second
	}
	ap, err := netip.ParseAddrPort(dst)
	if err != nil {
		return Result{Outcome: Unreachable, Err: err}
	}
	var conn net.Conn
	err = ns.Do(func() error {
		var err error
		conn, err = dialer(opt, ap.Addr().Is6()).Dial(proto, dst)
		return err
	})
	if err != nil {
		return Result{Outcome: classify(err), Err: err}
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(opt.Timeout))
	if proto == "udp" {
		if _, err := conn.Write([]byte("hello\n")); err != nil {
			return Result{Outcome: classify(err), Err: err}
		}
	}
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return Result{Outcome: classify(err), Err: err}
	}
	var ob Observation
	if err := json.Unmarshal(line, &ob); err != nil {
		return Result{Outcome: Unreachable, Err: fmt.Errorf("bad answer %q: %w", line, err)}
	}
	return Result{Outcome: OK, Seen: ob}
}
