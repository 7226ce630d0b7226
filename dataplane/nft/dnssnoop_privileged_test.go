package nft_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	nfqueue "github.com/florianl/go-nfqueue/v2"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// dnsQueue is the queue the tests' agent reads.
const dnsQueue = 7

// noReader: no one reads the queue.
const noReader = -1

// TestPrivilegedDNSSnoopAnswers: a DNS answer to a pod in DNSSnoop.Pods, forwarded from a
// resolver elsewhere (directly, or through a Service that DNATs port 53 to 5353) or sent by one
// on the node, waits in the queue for the reader's verdict (dropped: the pod never gets it;
// accepted: it does) and passes when nothing reads the queue; the answers to another pod or
// from a resolver asked on another port, and a datagram from port 53 that answers nothing, are
// never queued. IPv4 and IPv6.
func TestPrivilegedDNSSnoopAnswers(t *testing.T) {
	privileged.Require(t)
	if compatQueue {
		t.Log("the kernel has no nft queue expression: queueing with the xtables NFQUEUE target")
	}
	pod, node, res := netns.New(t, "pod"), netns.New(t, "node"), netns.New(t, "resolver")
	for _, ns := range []*netns.NS{pod, node, res} { // link-local addresses usable at once: ND works
		ns.MustRun(t, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0")
	}
	netns.Veth(t, pod, "eth0", node, "pod0")
	netns.Veth(t, node, "ext0", res, "eth0")
	pod.Addr(t, "eth0", "10.244.0.5/24", "10.244.0.6/24", "fd00:10:244::5/64", "fd00:10:244::6/64")
	node.Addr(t, "pod0", "10.244.0.1/24", "fd00:10:244::1/64")
	node.Addr(t, "ext0", "192.0.2.1/24", "2001:db8::1/64")
	res.Addr(t, "eth0", "192.0.2.53/24", "192.0.2.66/24", "2001:db8::53/64", "2001:db8::66/64")
	for _, err := range []error{
		pod.Script("ip route add default via 10.244.0.1", "ip -6 route add default via fd00:10:244::1"),
		node.Script("sysctl -qw net.ipv4.ip_forward=1", "sysctl -qw net.ipv6.conf.all.forwarding=1"),
		res.Script("ip route add 10.244.0.0/24 via 192.0.2.1", "ip -6 route add fd00:10:244::/64 via 2001:db8::1"),
		// A Service whose target port is not 53, as kube-proxy would DNAT it.
		node.Script("nft add table inet labproxy",
			"nft add chain inet labproxy pre { type nat hook prerouting priority dstnat ; }",
			"nft add rule inet labproxy pre ip daddr 10.96.0.10 udp dport 53 dnat ip to 192.0.2.53:5353",
			"nft add rule inet labproxy pre ip6 daddr fd00:96::10 udp dport 53 dnat ip6 to [2001:db8::53]:5353"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	a := netip.MustParseAddr
	apply, _, list := tableIn(t, node)
	trusted := []netip.Addr{a("192.0.2.53"), a("10.244.0.1"), a("10.96.0.10"), a("2001:db8::53"), a("fd00:10:244::1"), a("fd00:96::10")}
	apply(&dataplane.NftablesState{DNSSnoop: dataplane.DNSSnoop{Pods: []dataplane.SnoopedPod{{IP: a("10.244.0.5"), Namespace: "ns"}, {IP: a("fd00:10:244::5"), Namespace: "ns"}}, Queue: dnsQueue, Resolvers: trusted}})

	type family struct {
		name       string
		pod, other netip.Addr
		// resolver answers on ports 53 and 5353, own (the node's) on 53, service is DNATed
		// to resolver:5353; rogue answers on 53 and is not a trusted resolver.
		resolver, own, service, rogue netip.Addr
	}
	families := []family{
		{"IPv4", a("10.244.0.5"), a("10.244.0.6"), a("192.0.2.53"), a("10.244.0.1"), a("10.96.0.10"), a("192.0.2.66")},
		{"IPv6", a("fd00:10:244::5"), a("fd00:10:244::6"), a("2001:db8::53"), a("fd00:10:244::1"), a("fd00:96::10"), a("2001:db8::66")},
	}
	servers := dnsServers{}
	for _, f := range families {
		servers.serve(t, res, netip.AddrPortFrom(f.rogue, 53))
		servers.serve(t, res, netip.AddrPortFrom(f.resolver, 53))
		servers.serve(t, res, netip.AddrPortFrom(f.resolver, 5353))
		servers.serve(t, node, netip.AddrPortFrom(f.own, 53))
		pod.MustRun(t, "ping", "-c1", "-W2", f.resolver.String()) // neighbours resolved: no case waits for one
	}
	port := netip.AddrPortFrom
	for _, f := range families {
		for _, c := range []struct {
			name    string
			verdict int // of the reader; noReader
			pod     netip.Addr
			// to is where the pod asks; with unsolicited, it asks nothing: the resolver sends
			// first, from to (port 53), to the pod's port 53.
			to                netip.AddrPort
			unsolicited       bool
			queued, delivered bool
		}{
			{"queued, dropped by the reader", nfqueue.NfDrop, f.pod, port(f.resolver, 53), false, true, false},
			{"queued, accepted by the reader", nfqueue.NfAccept, f.pod, port(f.resolver, 53), false, true, true},
			{"no reader: bypassed", noReader, f.pod, port(f.resolver, 53), false, false, true},
			{"a pod not in the set: not queued", nfqueue.NfDrop, f.other, port(f.resolver, 53), false, false, true},
			{"not a reply: not queued", nfqueue.NfDrop, f.pod, port(f.resolver, 53), true, false, true},
			{"from the node's resolver: queued, dropped", nfqueue.NfDrop, f.pod, port(f.own, 53), false, true, false},
			{"through a Service to port 5353: queued, dropped", nfqueue.NfDrop, f.pod, port(f.service, 53), false, true, false},
			{"asked on port 5353: not queued", nfqueue.NfDrop, f.pod, port(f.resolver, 5353), false, false, true},
			{"from a server not trusted: not queued", nfqueue.NfDrop, f.pod, port(f.rogue, 53), false, false, true},
		} {
			t.Run(f.name+"/"+c.name, func(t *testing.T) {
				var r *queueReader
				if c.verdict != noReader {
					r = readQueue(t, node, dnsQueue, c.verdict)
				}
				payload := fmt.Sprintf("%s: %s", f.name, c.name)
				var got string
				var err error
				if c.unsolicited {
					got, err = servers.unsolicited(t, pod, c.to, c.pod, payload, c.delivered)
				} else {
					got, err = query(pod, c.pod, c.to, payload, c.delivered)
				}
				want := answer(payload)
				if c.delivered && got != want {
					t.Errorf("the pod got %q, %v; want %q", got, err, want)
				}
				if !c.delivered && err == nil {
					t.Errorf("the pod got %q, want nothing: the reader dropped it", got)
				}
				if r == nil {
					return
				}
				if c.queued {
					poll.Eventually(t, "the reader saw the answer", 2*time.Second, func() error {
						if !r.saw(want) {
							return errors.New("not seen")
						}
						return nil
					})
				} else if r.saw(want) {
					t.Errorf("queued, want it not queued")
				}
			})
		}
	}
	if t.Failed() {
		t.Log(list())
	}

	// Another queue number: the rules are written again with it.
	apply(&dataplane.NftablesState{DNSSnoop: dataplane.DNSSnoop{Pods: []dataplane.SnoopedPod{{IP: a("10.244.0.5"), Namespace: "ns"}}, Queue: dnsQueue + 1, Resolvers: trusted}})
	if out := list(); strings.Count(out, fmt.Sprintf("queue flags bypass to %d\n", dnsQueue+1)) != 4 || strings.Count(out, "queue ") != 4 {
		t.Errorf("after a change of queue, want the 4 rules with queue %d:\n%s", dnsQueue+1, out)
	}
	// No pod: no rule, and no hook has a chain.
	apply(&dataplane.NftablesState{DNSSnoop: dataplane.DNSSnoop{Queue: dnsQueue}})
	if out := list(); strings.Contains(out, "queue") || strings.Contains(out, " hook ") {
		t.Errorf("without pods, want no queue rule and no base chain:\n%s", out)
	}
}

// answer is what the resolvers answer to query.
func answer(query string) string { return "answer to " + query }

// dnsServers are resolvers by address and port.
type dnsServers map[netip.AddrPort]*net.UDPConn

// serve answers every datagram to at, in ns, with answer.
func (s dnsServers) serve(t *testing.T, ns *netns.NS, at netip.AddrPort) {
	t.Helper()
	var c *net.UDPConn
	if err := ns.Do(func() (err error) {
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(at))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s[at] = c
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteToUDPAddrPort([]byte(answer(string(buf[:n]))), from)
		}
	}()
}

// receiveWait is how long a datagram that should arrive is waited for; one that should not is
// given dropWait.
const receiveWait, dropWait = 2 * time.Second, 500 * time.Millisecond

// query sends payload from src (any port) to a resolver and returns its answer, or an error
// when none came in time.
func query(ns *netns.NS, src netip.Addr, dst netip.AddrPort, payload string, expect bool) (string, error) {
	var c *net.UDPConn
	if err := ns.Do(func() (err error) {
		c, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Write([]byte(payload)); err != nil {
		return "", err
	}
	return receive(c, expect)
}

// unsolicited has the resolver at from send the answer to payload to port 53 of pod (in ns),
// which asked nothing; returns what the pod got.
func (s dnsServers) unsolicited(t *testing.T, ns *netns.NS, from netip.AddrPort, pod netip.Addr, payload string, expect bool) (string, error) {
	t.Helper()
	var c *net.UDPConn
	if err := ns.Do(func() (err error) {
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(pod, 53)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := s[from].WriteToUDPAddrPort([]byte(answer(payload)), netip.AddrPortFrom(pod, 53)); err != nil {
		t.Fatal(err)
	}
	return receive(c, expect)
}

func receive(c *net.UDPConn, expect bool) (string, error) {
	wait := dropWait
	if expect {
		wait = receiveWait
	}
	buf := make([]byte, 1500)
	_ = c.SetReadDeadline(time.Now().Add(wait))
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// queueReader stands for the agent: it reads a queue, keeps the packets and gives each the same
// verdict.
type queueReader struct {
	mu      sync.Mutex
	packets [][]byte
}

// readQueue reads queue num in ns until the test ends.
func readQueue(t *testing.T, ns *netns.NS, num uint16, verdict int) *queueReader {
	t.Helper()
	r := &queueReader{}
	ctx, cancel := context.WithCancel(context.Background())
	var q *nfqueue.Nfqueue
	err := ns.Do(func() (err error) {
		q, err = nfqueue.Open(&nfqueue.Config{NfQueue: num, MaxPacketLen: 0xffff, MaxQueueLen: 0xff,
			Copymode: nfqueue.NfQnlCopyPacket, WriteTimeout: time.Second})
		if err != nil {
			return err
		}
		err = q.RegisterWithErrorFunc(ctx, func(a nfqueue.Attribute) int {
			r.mu.Lock()
			r.packets = append(r.packets, bytes.Clone(*a.Payload))
			r.mu.Unlock()
			if err := q.SetVerdict(*a.PacketID, verdict); err != nil {
				t.Errorf("verdict: %v", err)
			}
			return 0
		}, func(error) int { return 1 })
		if err != nil {
			q.Close()
		}
		return err
	})
	if err != nil {
		cancel()
		t.Fatalf("reading queue %d: %v", num, err)
	}
	t.Cleanup(func() { cancel(); q.Close() })
	return r
}

// saw tells whether a queued packet carried payload.
func (r *queueReader) saw(payload string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.packets {
		if bytes.Contains(p, []byte(payload)) {
			return true
		}
	}
	return false
}
