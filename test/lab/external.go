package lab

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/egressd/egressd/test/netns"
)

// ServerPorts are the TCP and UDP ports every external host serves on.
var ServerPorts = []uint16{80, 443, 8080}

// External is a host outside the cluster on the fabric: it owns documentation-range addresses
// (on its loopback; every node routes them to it) and runs servers that answer with what they saw.
type External struct {
	Name   string
	NS     *netns.NS
	Fabric netip.Addr // its v4 address on the fabric
	Addrs  []netip.Addr
	obs    *observer
	// closers are sockets the lab closes with the host.
	closers []io.Closer

	// Fabric6 is its v6 address on the fabric.
	Fabric6 netip.Addr
}

// ExternalOptions of AddExternal.
type ExternalOptions struct {
	// Forwarding makes the host a gateway: it forwards what it receives that is not for itself.
	Forwarding bool
}

// AddExternal adds a host owning addrs (e.g. "203.0.113.10", "2001:db8::10").
func (l *Lab) AddExternal(name string, o ExternalOptions, addrs ...string) (*External, error) {
	l.mu.Lock()
	j := len(l.externals)
	l.mu.Unlock()
	e := &External{Name: name, Fabric: netip.MustParseAddr(fmt.Sprintf(fabricV4, 100+j))}
	fabric6 := netip.MustParseAddr(fmt.Sprintf(fabricV6, 0x100+j))
	e.Fabric6 = fabric6
	var err error
	if e.NS, err = l.newNS("x" + name); err != nil {
		return nil, err
	}
	if _, err := l.attach(e.NS, name); err != nil {
		return nil, err
	}
	script := []string{
		"ip addr add " + e.Fabric.String() + "/24 dev eth0",
		"ip addr add " + fabric6.String() + "/64 dev eth0 nodad",
		"sysctl -qw net.ipv4.conf.all.rp_filter=0",
	}
	if o.Forwarding {
		script = append(script, "sysctl -qw net.ipv4.ip_forward=1", "sysctl -qw net.ipv6.conf.all.forwarding=1")
	}
	for _, a := range addrs {
		ip := netip.MustParseAddr(a)
		e.Addrs = append(e.Addrs, ip)
		if ip.Is4() {
			script = append(script, "ip addr add "+a+"/32 dev lo")
		} else {
			script = append(script, "ip addr add "+a+"/128 dev lo nodad")
		}
	}
	// Replies to pods whose IP is preserved go back through their node.
	for _, n := range l.Nodes {
		script = append(script,
			fmt.Sprintf("ip route add %s via %s", n.PodV4, n.IPv4),
			fmt.Sprintf("ip -6 route add %s via %s", n.PodV6, n.IPv6))
	}
	if err := e.NS.Script(script...); err != nil {
		return nil, err
	}
	for _, n := range l.Nodes {
		var routes []string
		for _, ip := range e.Addrs {
			if ip.Is4() {
				routes = append(routes, fmt.Sprintf("ip route add %s/32 via %s", ip, e.Fabric))
			} else {
				routes = append(routes, fmt.Sprintf("ip -6 route add %s/128 via %s", ip, fabric6))
			}
		}
		if err := n.NS.Script(routes...); err != nil {
			return nil, err
		}
	}
	e.obs = newObserver(name)
	l.onClose(e.obs.close)
	l.onClose(func() {
		for _, c := range e.closers {
			c.Close()
		}
	})
	if err := e.obs.start(e.NS, e.Addrs, ServerPorts); err != nil {
		return nil, fmt.Errorf("servers on %s: %w", name, err)
	}
	l.mu.Lock()
	l.externals = append(l.externals, e)
	l.mu.Unlock()
	return e, nil
}

// HostPort formats an address and port for the client calls ("[v6]:port" for IPv6).
func HostPort(ip netip.Addr, port uint16) string { return netip.AddrPortFrom(ip, port).String() }

// Nft runs an nft script in the host's namespace (tests use it to break things on purpose).
func (e *External) Nft(script string) error {
	cmd := e.NS.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft on %s: %v: %s", e.Name, err, out)
	}
	return nil
}

// TCP connects from the host to dst (e.g. a pod serving with Serve) and returns what the
// server saw.
func (e *External) TCP(dst string, o ...ClientOptions) Result {
	return call(e.NS, "tcp", dst, first(o))
}

// UDP sends a datagram from the host to dst (e.g. a pod serving with Serve) and returns what
// the server saw.
func (e *External) UDP(dst string, o ...ClientOptions) Result {
	return call(e.NS, "udp", dst, first(o))
}

// CountUDP counts the datagrams the host receives on port (on its first address), without
// answering: the sink of throughput measurements. The returned function reads the count.
func (e *External) CountUDP(port uint16) (func() uint64, error) {
	var pc net.PacketConn
	if err := e.NS.Do(func() error {
		var err error
		pc, err = net.ListenPacket("udp", netip.AddrPortFrom(e.Addrs[0], port).String())
		if err == nil {
			_ = pc.(*net.UDPConn).SetReadBuffer(8 << 20)
		}
		return err
	}); err != nil {
		return nil, err
	}
	var n atomic.Uint64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	e.closers = append(e.closers, pc)
	return n.Load, nil
}
