package lab

import (
	"net"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"
)

// SendDatagram sends one UDP datagram of size bytes of payload from the pod to dst ("ip:port",
// v6 as "[ip]:port"). A datagram larger than the pod's MTU leaves in fragments: the pod's kernel
// fragments it (IPv4 with DF clear, as path MTU discovery is turned off on the socket; IPv6,
// where only the sender fragments).
func (p *Pod) SendDatagram(dst string, size int) error {
	return p.NS.Do(func() error {
		conn, err := net.Dial("udp", dst)
		if err != nil {
			return err
		}
		defer conn.Close()
		if netip.MustParseAddrPort(dst).Addr().Is4() {
			raw, err := conn.(*net.UDPConn).SyscallConn()
			if err != nil {
				return err
			}
			var serr error
			if err := raw.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DONT)
			}); err != nil {
				return err
			}
			if serr != nil {
				return serr
			}
		}
		_, err = conn.Write(make([]byte, size))
		return err
	})
}

// Datagrams is what an external host received on a UDP port (see ReceiveDatagrams).
type Datagrams struct {
	mu    sync.Mutex
	sizes map[netip.Addr][]int
}

// Sizes returns the payload sizes of the datagrams received so far on local address addr, in
// order of arrival: a datagram that arrived in fragments counts once, whole, once the kernel
// reassembled it; one missing a fragment never arrives.
func (d *Datagrams) Sizes(addr netip.Addr) []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int(nil), d.sizes[addr]...)
}

// ReceiveDatagrams listens on port on every address of the host and records the size of each
// datagram received, without answering.
func (e *External) ReceiveDatagrams(port uint16) (*Datagrams, error) {
	d := &Datagrams{sizes: map[netip.Addr][]int{}}
	for _, a := range e.Addrs {
		var pc net.PacketConn
		if err := e.NS.Do(func() error {
			var err error
			pc, err = net.ListenPacket("udp", netip.AddrPortFrom(a, port).String())
			return err
		}); err != nil {
			return nil, err
		}
		e.closers = append(e.closers, pc)
		go func() {
			buf := make([]byte, 65536)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				d.mu.Lock()
				d.sizes[a] = append(d.sizes[a], n)
				d.mu.Unlock()
			}
		}()
	}
	return d, nil
}
