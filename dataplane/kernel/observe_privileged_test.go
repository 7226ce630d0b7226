package kernel_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane/tc"
	"github.com/egressd/egressd/test/netns"
)

// udpServer answers what it receives in ns and records the source of each payload.
type udpServer struct {
	mu   sync.Mutex
	seen map[string]netip.Addr
}

// Each address has its own socket, so that answers leave from the address asked.
func serveUDP(t *testing.T, ns *netns.NS, addrs ...netip.Addr) *udpServer {
	t.Helper()
	s := &udpServer{seen: map[string]netip.Addr{}}
	for _, a := range addrs {
		s.serve(t, ns, netip.AddrPortFrom(a, udpPort).String())
	}
	return s
}

func (s *udpServer) serve(t *testing.T, ns *netns.NS, addr string) {
	var c net.PacketConn
	if err := ns.Do(func() (err error) { c, err = net.ListenPacket("udp4", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.seen[string(buf[:n])] = from.(*net.UDPAddr).AddrPort().Addr().Unmap()
			s.mu.Unlock()
			_, _ = c.WriteTo(buf[:n], from)
		}
	}()
}

// from is the source payload arrived from, or no address if it did not arrive within d.
func (s *udpServer) from(payload string, d time.Duration) netip.Addr {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		s.mu.Lock()
		a, ok := s.seen[payload]
		s.mu.Unlock()
		if ok {
			return a
		}
	}
	return netip.Addr{}
}

// send sends payload from the pod to dst:udpPort and returns the echo, if one comes back.
func (l *lab) send(t *testing.T, to netip.Addr, payload string, wait time.Duration) (string, error) {
	t.Helper()
	var c *net.UDPConn
	if err := l.pod.Do(func() (err error) {
		c, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(to, udpPort)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(payload)); err != nil {
		return "", err
	}
	buf := make([]byte, 1500)
	_ = c.SetReadDeadline(time.Now().Add(wait))
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

var counterRE = regexp.MustCompile(`ip daddr (\S+) ip dscp (\S+) counter packets (\d+)`)

// received is how many packets the external host received per "destination dscp".
func (l *lab) received(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range counterRE.FindAllStringSubmatch(l.ext.MustRun(t, "nft", "list", "table", "inet", "egt"), -1) {
		n, _ := strconv.Atoi(m[3])
		out[m[1]+" dscp "+m[2]] = n
	}
	return out
}

// rtMonitor receives the node's route, rule, address and nexthop notifications.
type rtMonitor struct{ fd int }

func (l *lab) monitor(t *testing.T) *rtMonitor {
	t.Helper()
	m := &rtMonitor{fd: -1}
	l.in(t, func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		m.fd = fd
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			return err
		}
		for _, g := range []int{unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV6_IFADDR, unix.RTNLGRP_IPV4_ROUTE, unix.RTNLGRP_IPV6_ROUTE,
			unix.RTNLGRP_IPV4_RULE, unix.RTNLGRP_IPV6_RULE, unix.RTNLGRP_NEXTHOP} {
			if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, g); err != nil {
				return fmt.Errorf("netlink group %d: %w", g, err)
			}
		}
		return nil
	})
	t.Cleanup(func() { unix.Close(m.fd) })
	return m
}

// drain returns the notifications queued so far about objects stamped with egressd's protocol
// (the kernel queues them before the change's syscall returns).
func (m *rtMonitor) drain(t *testing.T) []string {
	t.Helper()
	var out []string
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(m.fd, buf, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EAGAIN) {
			return out
		}
		if err != nil {
			t.Fatalf("netlink monitor: %v", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			t.Fatalf("netlink monitor: %v", err)
		}
		for _, msg := range msgs {
			if proto, ok := protocolOf(msg); ok && proto == protocol {
				out = append(out, fmt.Sprintf("%s %x", rtmNames[msg.Header.Type], msg.Data))
			}
		}
	}
}

// protocolOf reads the protocol an rtnetlink notification's object is stamped with.
func protocolOf(m syscall.NetlinkMessage) (uint8, bool) {
	d := m.Data
	attr := func(hdrLen int, typ uint16) (uint8, bool) {
		if len(d) < hdrLen {
			return 0, false
		}
		attrs, err := nl.ParseRouteAttr(d[hdrLen:])
		if err != nil {
			return 0, false
		}
		for _, a := range attrs {
			if a.Attr.Type == typ && len(a.Value) > 0 {
				return a.Value[0], true
			}
		}
		return 0, true
	}
	switch m.Header.Type {
	case unix.RTM_NEWROUTE, unix.RTM_DELROUTE:
		if len(d) >= 12 {
			return d[5], true
		}
	case unix.RTM_NEWNEXTHOP, unix.RTM_DELNEXTHOP:
		if len(d) >= 8 {
			return d[2], true
		}
	case unix.RTM_NEWRULE, unix.RTM_DELRULE:
		return attr(12, unix.FRA_PROTOCOL)
	case unix.RTM_NEWADDR, unix.RTM_DELADDR:
		return attr(unix.SizeofIfAddrmsg, 11) // IFA_PROTO
	}
	return 0, false
}

// ingressPrograms are the programs attached at ingress of the node's ifname, in order:
// "<name> <attachment>" (a tcx link without its ID).
func (l *lab) ingressPrograms(t *testing.T, ifname string) []string {
	t.Helper()
	var names []string
	l.in(t, func() error {
		progs, err := tc.Query(ifname)
		for _, p := range progs {
			a := p.Attachment
			if strings.HasPrefix(a, "tcx link") {
				a = "tcx link"
			}
			names = append(names, p.Name+" "+a)
		}
		return err
	})
	return names
}

// addresses are the node's IPv4 addresses with the protocol each is stamped with (IFA_PROTO,
// which iproute2 before 6.3 does not show), by interface name.
func (l *lab) addresses(t *testing.T) map[string]uint8 {
	t.Helper()
	out := map[string]uint8{}
	l.in(t, func() error {
		req := nl.NewNetlinkRequest(unix.RTM_GETADDR, unix.NLM_F_DUMP)
		req.AddData(nl.NewIfInfomsg(unix.AF_INET))
		msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWADDR)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if len(m) < unix.SizeofIfAddrmsg {
				continue
			}
			attrs, err := nl.ParseRouteAttr(m[unix.SizeofIfAddrmsg:])
			if err != nil {
				return err
			}
			var ip netip.Addr
			var proto uint8
			for _, a := range attrs {
				switch a.Attr.Type {
				case unix.IFA_LOCAL:
					ip, _ = netip.AddrFromSlice(a.Value)
				case 11: // IFA_PROTO
					proto = a.Value[0]
				}
			}
			ifi, err := net.InterfaceByIndex(int(binary.NativeEndian.Uint32(m[4:])))
			if err != nil {
				return err
			}
			out[fmt.Sprintf("%s/%d %s", ip, m[1], ifi.Name)] = proto
		}
		return nil
	})
	return out
}
