package router

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// routerLab: a node whose eth0 is on an external segment (one host, ext, 192.0.2.1) and whose
// vpod faces a pod (10.0.0.2, default route via the node's 10.0.0.1); the node itself is the
// router's client.
type routerLab struct {
	node, pod, ext *netns.NS
}

func newRouterLab(t *testing.T) *routerLab {
	l := &routerLab{node: netns.New(t, "node"), pod: netns.New(t, "pod"), ext: netns.New(t, "ext")}
	netns.Veth(t, l.node, "eth0", l.ext, "eth0")
	netns.Veth(t, l.node, "vpod", l.pod, "eth0")
	l.node.Addr(t, "eth0", "192.0.2.10/24")
	l.ext.Addr(t, "eth0", "192.0.2.1/24")
	l.node.Addr(t, "vpod", "10.0.0.1/24")
	l.pod.Addr(t, "eth0", "10.0.0.2/24")
	if err := l.pod.Script("ip route add default via 10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	return l
}

func (l *routerLab) apply(t *testing.T, c *Config) Applied {
	t.Helper()
	var done Applied
	if err := l.node.Do(func() (err error) {
		done, err = Apply(c, l.pod.Path(), "eth0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return done
}

// listen accepts TCP on addr inside ns and reports each connection's source address.
func listen(t *testing.T, ns *netns.NS, addr string) <-chan netip.Addr {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	seen := make(chan netip.Addr, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			seen <- c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
			c.Close()
		}
	}()
	return seen
}

func dial(ns *netns.NS, addr string) error {
	return ns.Do(func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// TestPrivilegedRouterApply: the router is configured in the pod (macvlan on the node's eth0
// inferred from the address, addresses, default route via the gateway, the node's network kept
// on eth0); a rule DNATs to its destination and SNATs to the router's address; without a
// fallback, another port is rejected even when something in the pod listens on it (the input
// chain, not only the kernel's answer to a closed port); applied again with no rules and a
// fallback, it replaces the earlier configuration and sends every port to the fallback.
func TestPrivilegedRouterApply(t *testing.T) {
	privileged.Require(t)
	l := newRouterLab(t)
	seen8080 := listen(t, l.ext, "192.0.2.1:8080")
	seen9999 := listen(t, l.ext, "192.0.2.1:9999")
	inPod := listen(t, l.pod, "10.0.0.2:9999")

	c := &Config{Mode: Bridge, Addresses: []netip.Prefix{netip.MustParsePrefix("192.0.2.50/24")},
		Gateways:        []netip.Addr{netip.MustParseAddr("192.0.2.1")},
		Rules:           []Rule{{Protocol: TCP, Port: 80, Destination: netip.MustParseAddrPort("192.0.2.1:8080")}},
		ClusterNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	if done := l.apply(t, c); done.Master != "eth0" {
		t.Errorf("master %q, want eth0 (the node link on 192.0.2.0/24)", done.Master)
	}
	routes, _ := l.pod.Run("ip", "route")
	for _, want := range []string{"default via 192.0.2.1 dev net1", "10.0.0.0/8 via 10.0.0.1 dev eth0"} {
		if !strings.Contains(routes, want) {
			t.Errorf("pod routes lack %q:\n%s", want, routes)
		}
	}
	if err := dial(l.node, "10.0.0.2:80"); err != nil {
		t.Fatalf("rule: %v", err)
	}
	if src := <-seen8080; src != netip.MustParseAddr("192.0.2.50") {
		t.Errorf("the destination saw %s, want the router's address", src)
	}
	if err := dial(l.node, "10.0.0.2:9999"); !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("other port without fallback, a listener in the pod: %v, want refused", err)
	}
	select {
	case a := <-inPod:
		t.Errorf("the pod's own listener accepted %s", a)
	default:
	}

	c.Rules, c.Fallback = nil, netip.MustParseAddr("192.0.2.1")
	l.apply(t, c)
	out, _ := l.pod.Run("ip", "-o", "link", "show", "type", "macvlan")
	if n := strings.Count(out, "net1"); n != 1 {
		t.Errorf("%d macvlans named net1 after a second apply:\n%s", n, out)
	}
	if err := dial(l.node, "10.0.0.2:9999"); err != nil {
		t.Fatalf("fallback: %v", err)
	}
	select {
	case src := <-seen9999:
		if src != netip.MustParseAddr("192.0.2.50") {
			t.Errorf("the fallback saw %s, want the router's address", src)
		}
	case a := <-inPod:
		t.Errorf("the pod's own listener accepted %s, not the fallback", a)
	}
	if err := dial(l.node, "10.0.0.2:80"); !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("the old rule's port now goes to the fallback's closed 80: %v, want refused", err)
	}
}

// TestPrivilegedRouterHostAddress: a router address without a prefix length (a /32) has no
// connected route to its gateway: the gateway gets a route on the link first (as upstream's
// egress-router-cni), so the default route via it is accepted and the rule's traffic flows.
func TestPrivilegedRouterHostAddress(t *testing.T) {
	privileged.Require(t)
	l := newRouterLab(t)
	seen := listen(t, l.ext, "192.0.2.1:8080")
	c := &Config{Mode: Bridge, Master: "eth0", Addresses: []netip.Prefix{netip.MustParsePrefix("192.0.2.50/32")},
		Gateways:        []netip.Addr{netip.MustParseAddr("192.0.2.1")},
		Rules:           []Rule{{Protocol: TCP, Port: 80, Destination: netip.MustParseAddrPort("192.0.2.1:8080")}},
		ClusterNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	l.apply(t, c)
	routes, _ := l.pod.Run("ip", "route")
	if !strings.Contains(routes, "default via 192.0.2.1 dev net1") {
		t.Errorf("pod routes lack the default route via the gateway:\n%s", routes)
	}
	if err := dial(l.node, "10.0.0.2:80"); err != nil {
		t.Fatalf("rule: %v", err)
	}
	if src := <-seen; src != netip.MustParseAddr("192.0.2.50") {
		t.Errorf("the destination saw %s, want the router's address", src)
	}
}
