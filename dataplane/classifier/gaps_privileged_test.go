package classifier_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/classifier"
)

var remote, remote6 = netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("2001:db8:99::1")

// frame builds an Ethernet frame from src to dst carrying l4 (the L4 header and payload, or a
// fragment of them) with IP protocol proto; frag, when not nil, makes it the fragment of
// datagram id at offset (in 8-byte units) with more fragments to come or not (IPv6: a fragment
// header).
func frame(src, dst netip.Addr, proto uint8, l4 []byte, frag *fragInfo) []byte {
	b := make([]byte, 14, 14+48+len(l4))
	b[0], b[6] = 2, 2
	if src.Is4() {
		binary.BigEndian.PutUint16(b[12:], 0x0800)
		ip := make([]byte, 20)
		ip[0], ip[8], ip[9] = 0x45, 64, proto
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
		if frag != nil {
			binary.BigEndian.PutUint16(ip[4:], uint16(frag.id))
			fo := frag.offset
			if frag.more {
				fo |= 0x2000
			}
			binary.BigEndian.PutUint16(ip[6:], fo)
		}
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		return append(append(b, ip...), l4...)
	}
	binary.BigEndian.PutUint16(b[12:], 0x86dd)
	ip := make([]byte, 40)
	ip[0], ip[6], ip[7] = 0x60, proto, 64
	var fh []byte
	if frag != nil {
		ip[6] = 44
		fh = make([]byte, 8)
		fh[0] = proto
		fo := frag.offset << 3
		if frag.more {
			fo |= 1
		}
		binary.BigEndian.PutUint16(fh[2:], fo)
		binary.BigEndian.PutUint32(fh[4:], frag.id)
	}
	binary.BigEndian.PutUint16(ip[4:], uint16(len(fh)+len(l4)))
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	return append(append(append(b, ip...), fh...), l4...)
}

type fragInfo struct {
	id     uint32
	offset uint16
	more   bool
}

// udp is a UDP header and payload from port 40000 (or sport) to dport.
func udp(sport, dport uint16, payload int) []byte {
	b := make([]byte, 8+payload)
	binary.BigEndian.PutUint16(b, sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+payload))
	return b
}

func fragState() *dataplane.ClassifierState {
	st := firewallState()
	st.Firewalls[0].Rules = []dataplane.FirewallRule{
		{Index: 0, Prefixes: pfxs("192.0.2.0/24", "2001:db8::/32"), Ports: []dataplane.Port{{Protocol: 17, Port: 4789}}},
		{Index: 1, Prefixes: pfxs("198.51.100.0/24")},
		{Index: 2, Deny: true, Prefixes: pfxs("0.0.0.0/0", "::/0")},
	}
	return st
}

// TestPrivilegedClassifierFragments: a UDP datagram larger than the MTU, to an allowed port,
// passes whole (every fragment follows its first), and one to a denied port is dropped whole,
// IPv4 and IPv6. A later fragment whose first was not seen is dropped where ports decide, and
// judged by its destination where they cannot (allowed or denied by a rule without ports).
func TestPrivilegedClassifierFragments(t *testing.T) {
	c := load(t)
	if failed := c.Apply(fragState(), nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	ip := netip.MustParseAddr
	type step struct {
		name string
		data []byte
		want uint32
	}
	var steps []step
	for _, fam := range []struct {
		src, allowedDst netip.Addr
		id              uint32
	}{{podA, ip("192.0.2.1"), 7}, {podA6, ip("2001:db8::1"), 70000}} {
		first := func(dport uint16, id uint32) []byte {
			return frame(fam.src, fam.allowedDst, 17, udp(40000, dport, 1400), &fragInfo{id: id, more: true})
		}
		later := func(dst netip.Addr, id uint32, more bool) []byte {
			return frame(fam.src, dst, 17, make([]byte, 600), &fragInfo{id: id, offset: 176, more: more})
		}
		other := ip("203.0.113.1")
		allowedByPrefix := ip("198.51.100.9")
		if fam.src.Is6() {
			other, allowedByPrefix = ip("2001:db9::1"), ip("2001:db8::2") // rule 0 has ports there
		}
		steps = append(steps,
			step{fam.src.String() + ": first fragment to the allowed port", first(4789, fam.id), tcxNext},
			step{fam.src.String() + ": its middle fragment", later(fam.allowedDst, fam.id, true), tcxNext},
			step{fam.src.String() + ": its last fragment", later(fam.allowedDst, fam.id, false), tcxNext},
			step{fam.src.String() + ": first fragment to a denied port", first(4790, fam.id+1), tcxDrop},
			step{fam.src.String() + ": its last fragment", later(fam.allowedDst, fam.id+1, false), tcxDrop},
			step{fam.src.String() + ": a later fragment without its first, where ports decide", later(fam.allowedDst, fam.id+2, false), tcxDrop},
			step{fam.src.String() + ": a later fragment without its first, to a denied destination", later(other, fam.id+3, false), tcxDrop},
		)
		if fam.src.Is4() {
			steps = append(steps, step{"a later fragment without its first, to a destination allowed whatever the port", later(allowedByPrefix, fam.id+4, false), tcxNext})
		} else {
			steps = append(steps, step{"v6: a later fragment without its first, where ports decide (rule 0 has ports there)", later(allowedByPrefix, fam.id+4, false), tcxDrop})
		}
	}
	steps = append(steps,
		step{"a later fragment from a pod without firewall", frame(podB, ip("192.0.2.1"), 17, make([]byte, 600), &fragInfo{id: 9, offset: 176}), tcxNext},
		step{"a later fragment to the cluster network", frame(podA, ip("10.244.3.9"), 17, make([]byte, 600), &fragInfo{id: 10, offset: 176}), tcxNext},
		// An unfragmented IPv6 datagram with a fragment header (an atomic fragment) has ports.
		step{"v6 atomic fragment to the allowed port", frame(podA6, ip("2001:db8::1"), 17, udp(40000, 4789, 8), &fragInfo{id: 11}), tcxNext},
	)
	for _, s := range steps {
		if got, _ := run(t, c, s.data); got != s.want {
			t.Errorf("%s: verdict %#x, want %#x", s.name, got, s.want)
		}
	}
	got, err := c.FragmentCounters()
	if err != nil {
		t.Fatal(err)
	}
	// Per family: 2 first fragments tracked, 3 later ones followed; v4: 1 unmatched judged (the
	// denied destination) + 1 (allowed by prefix), 1 dropped; v6: 1 unmatched, 2 dropped. The
	// fragment to the cluster network is judged by destination alone too.
	want := classifier.FragmentStats{Tracked: 4, Followed: 6, Unmatched: 4, Dropped: 3}
	if got != want {
		t.Errorf("fragment counters %+v, want %+v", got, want)
	}
	stats, err := c.FirewallCounters()
	if err != nil {
		t.Fatal(err)
	}
	// Rule 0: both families' first and two later fragments, and the atomic fragment; rule 2: the denied datagrams (first
	// and last fragment) and the denied destinations' later fragments.
	if n := stats[classifier.RuleRef{Namespace: "a", Rule: 0}].Packets; n != 7 {
		t.Errorf("rule 0 counted %d packets, want 7", n)
	}
	if n := stats[classifier.RuleRef{Namespace: "a", Rule: 2}].Packets; n != 6 {
		t.Errorf("rule 2 counted %d packets, want 6", n)
	}
}

func denyAll() *dataplane.ClassifierState {
	st := firewallState()
	st.Firewalls[0].Rules = []dataplane.FirewallRule{{Index: 0, Deny: true, Prefixes: pfxs("0.0.0.0/0", "::/0")}}
	return st
}

func icmp(typ uint8, id uint16, quoted []byte) []byte {
	b := make([]byte, 8, 8+len(quoted))
	b[0] = typ
	binary.BigEndian.PutUint16(b[4:], id)
	return append(b, quoted...)
}

// sctp is an SCTP common header from sport to dport with one chunk of type chunk.
func sctp(sport, dport uint16, chunk uint8) []byte {
	b := make([]byte, 12+4)
	binary.BigEndian.PutUint16(b, sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	b[12] = chunk
	binary.BigEndian.PutUint16(b[14:], 4)
	return b
}

func runToPod(t *testing.T, c *classifier.Classifier, data []byte) {
	t.Helper()
	ret, err := c.ToPod.Run(&ebpf.RunOptions{Data: data}) // never drops
	if err != nil || ret != tcxNext {
		t.Fatalf("egressd_topod: %#x, %v", ret, err)
	}
}

// TestPrivilegedClassifierRepliesNotTCPOrUDP: under Deny 0.0.0.0/0 and ::/0, a pod still answers
// pings from outside, answers SCTP associations others start and sends ICMP errors about
// connections conntrack knows; what it initiates itself (echo requests, unsolicited echo
// replies, SCTP INITs, errors about nothing known) stays denied. IPv4 and IPv6.
func TestPrivilegedClassifierRepliesNotTCPOrUDP(t *testing.T) {
	c := load(t)
	if failed := c.Apply(denyAll(), nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	for _, fam := range []struct {
		pod, peer            netip.Addr
		icmp, echo, echoRepl uint8
		unreach, tooBig      uint8
	}{{podA, remote, 1, 8, 0, 3, 3}, {podA6, remote6, 58, 128, 129, 1, 2}} {
		pod, peer := fam.pod, fam.peer
		check := func(name string, data []byte, want uint32) {
			t.Helper()
			if got, _ := run(t, c, data); got != want {
				t.Errorf("%s %s: verdict %#x, want %#x", pod, name, got, want)
			}
		}
		check("echo reply nobody asked for", frame(pod, peer, fam.icmp, icmp(fam.echoRepl, 77, nil), nil), tcxDrop)
		check("echo request", frame(pod, peer, fam.icmp, icmp(fam.echo, 77, nil), nil), tcxDrop)
		runToPod(t, c, frame(peer, pod, fam.icmp, icmp(fam.echo, 77, nil), nil)) // a ping from outside
		check("echo reply to a ping from outside", frame(pod, peer, fam.icmp, icmp(fam.echoRepl, 77, nil), nil), tcxNext)
		check("echo reply with another id", frame(pod, peer, fam.icmp, icmp(fam.echoRepl, 78, nil), nil), tcxDrop)
		check("echo reply to another peer", frame(pod, remote2(peer), fam.icmp, icmp(fam.echoRepl, 77, nil), nil), tcxDrop)

		check("SCTP association the pod starts", frame(pod, peer, 132, sctp(9, 40000, 1), nil), tcxDrop)
		check("SCTP data nobody asked for", frame(pod, peer, 132, sctp(9, 40000, 0), nil), tcxDrop)
		runToPod(t, c, frame(peer, pod, 132, sctp(40000, 9, 1), nil)) // INIT from outside
		check("SCTP INIT-ACK to an association from outside", frame(pod, peer, 132, sctp(9, 40000, 2), nil), tcxNext)
		check("SCTP data of it", frame(pod, peer, 132, sctp(9, 40000, 0), nil), tcxNext)
		check("SCTP data to another port", frame(pod, peer, 132, sctp(9, 40001, 0), nil), tcxDrop)

		// An ICMP error quoting the echo request from outside, and one quoting an SCTP packet
		// of the association from outside, are related; one quoting a packet of nothing known
		// is not.
		quotedEcho := frame(peer, pod, fam.icmp, icmp(fam.echo, 77, nil), nil)[14:]
		check("error about the ping from outside", frame(pod, peer, fam.icmp, icmp(fam.tooBig, 0, quotedEcho), nil), tcxNext)
		quotedSCTP := frame(peer, pod, 132, sctp(40000, 9, 0), nil)[14:]
		check("error about the association from outside", frame(pod, peer, fam.icmp, icmp(fam.unreach, 0, quotedSCTP), nil), tcxNext)
		quotedOther := frame(peer, pod, 132, sctp(40000, 10, 0), nil)[14:]
		check("error about nothing known", frame(pod, peer, fam.icmp, icmp(fam.unreach, 0, quotedOther), nil), tcxDrop)
	}
}

func remote2(a netip.Addr) netip.Addr { return a.Next() }

// TestPrivilegedClassifierICMPErrorsRelated: ICMP errors (port unreachable, time exceeded,
// packet too big) a pod sends about a TCP or UDP connection conntrack knows pass under Deny
// 0.0.0.0/0 and ::/0, whoever started the connection; errors quoting a packet of no known
// connection are dropped. The conntrack entries are real, created in a throwaway network
// namespace where the program runs.
func TestPrivilegedClassifierICMPErrorsRelated(t *testing.T) {
	c := load(t)
	if failed := c.Apply(denyAll(), nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New() // the thread is in it now
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	defer netns.Set(orig)
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, fam := range []struct {
		pod, peer                   netip.Addr
		af                          uint8
		icmp, unreach, exceeded, pb uint8
	}{{podA, remote, unix.AF_INET, 1, 3, 11, 3}, {podA6, remote6, unix.AF_INET6, 58, 1, 3, 2}} {
		pod, peer := fam.pod, fam.peer
		// A UDP flow from outside to the pod's port 53, and a TCP connection the pod made.
		for _, f := range []struct {
			proto        uint8
			src, dst     netip.Addr
			sport, dport uint16
		}{{17, peer, pod, 5353, 53}, {6, pod, peer, 41000, 443}} {
			flow := &netlink.ConntrackFlow{FamilyType: fam.af, TimeOut: 120,
				Forward: netlink.IPTuple{Protocol: f.proto, SrcIP: net.IP(f.src.AsSlice()), DstIP: net.IP(f.dst.AsSlice()), SrcPort: f.sport, DstPort: f.dport},
				Reverse: netlink.IPTuple{Protocol: f.proto, SrcIP: net.IP(f.dst.AsSlice()), DstIP: net.IP(f.src.AsSlice()), SrcPort: f.dport, DstPort: f.sport}}
			if f.proto == 6 {
				flow.ProtoInfo = &netlink.ProtoInfoTCP{State: 3} // established
			}
			if err := h.ConntrackCreate(netlink.ConntrackTable, netlink.InetFamily(fam.af), flow); err != nil {
				t.Fatalf("conntrack entry %+v: %v", f, err)
			}
		}
		check := func(name string, data []byte, want uint32) {
			t.Helper()
			if got, _ := run(t, c, data); got != want {
				t.Errorf("%s %s: verdict %#x, want %#x", pod, name, got, want)
			}
		}
		quoted := func(src, dst netip.Addr, proto uint8, sport, dport uint16) []byte {
			return frame(src, dst, proto, udp(sport, dport, 0), nil)[14:]
		}
		check("port unreachable about the UDP flow from outside", frame(pod, peer, fam.icmp, icmp(fam.unreach, 0, quoted(peer, pod, 17, 5353, 53)), nil), tcxNext)
		check("UDP reply of the flow from outside", frame(pod, peer, 17, udp(53, 5353, 8), nil), tcxNext)
		check("time exceeded about the pod's TCP connection", frame(pod, peer, fam.icmp, icmp(fam.exceeded, 0, quoted(peer, pod, 6, 443, 41000)), nil), tcxNext)
		check("packet too big about the pod's TCP connection", frame(pod, peer, fam.icmp, icmp(fam.pb, 0, quoted(peer, pod, 6, 443, 41000)), nil), tcxNext)
		check("port unreachable about an unknown UDP flow", frame(pod, peer, fam.icmp, icmp(fam.unreach, 0, quoted(peer, pod, 17, 5353, 54)), nil), tcxDrop)
		check("UDP the pod starts", frame(pod, peer, 17, udp(53, 5354, 8), nil), tcxDrop)
	}
}

// behindOptions is l4 of protocol proto behind n IPv6 Destination Options headers (8 bytes
// each, a PadN option), as the payload of a frame whose IP protocol is 60.
func behindOptions(n int, proto uint8, l4 []byte) []byte {
	var b []byte
	for i := range n {
		next := uint8(60)
		if i == n-1 {
			next = proto
		}
		b = append(b, next, 0, 1, 4, 0, 0, 0, 0)
	}
	return append(b, l4...)
}

// TestPrivilegedClassifierUnparsed: a packet whose ports the classifier does not read (behind
// more IPv6 extension headers than it walks, or a transport header cut short) cannot get past a
// rule restricted to ports: where such a rule could decide it, it is dropped; elsewhere it is
// judged by its destination. Headers it walks change nothing.
func TestPrivilegedClassifierUnparsed(t *testing.T) {
	c := load(t)
	st := firewallState()
	st.Firewalls[0].Rules = []dataplane.FirewallRule{
		{Index: 0, Prefixes: pfxs("2001:db8:5::/48", "198.51.100.0/24")},
		{Index: 1, Deny: true, Prefixes: pfxs("0.0.0.0/0", "::/0"), Ports: []dataplane.Port{{Protocol: 6, Port: 25}}},
	}
	if failed := c.Apply(st, nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	ip := netip.MustParseAddr
	syn := func(dport uint16) []byte {
		b := make([]byte, 20)
		binary.BigEndian.PutUint16(b, 40000)
		binary.BigEndian.PutUint16(b[2:], dport)
		b[12], b[13] = 5<<4, 0x02 // SYN
		return b
	}
	for _, s := range []struct {
		name string
		data []byte
		want uint32
	}{
		{"SMTP behind 2 extension headers", frame(podA6, ip("2001:db8::1"), 60, behindOptions(2, 6, syn(25)), nil), tcxDrop},
		{"HTTP behind 2 extension headers", frame(podA6, ip("2001:db8::1"), 60, behindOptions(2, 6, syn(80)), nil), tcxNext},
		{"SMTP behind 5 extension headers", frame(podA6, ip("2001:db8::1"), 60, behindOptions(5, 6, syn(25)), nil), tcxDrop},
		{"HTTP behind 5 extension headers, where the port rule could decide", frame(podA6, ip("2001:db8::1"), 60, behindOptions(5, 6, syn(80)), nil), tcxDrop},
		{"SMTP behind 5 extension headers, to a destination allowed whatever the port", frame(podA6, ip("2001:db8:5::1"), 60, behindOptions(5, 6, syn(25)), nil), tcxNext},
		{"SMTP cut short after the source port", frame(podA, ip("192.0.2.1"), 6, syn(25)[:2], nil), tcxDrop},
	} {
		if got, _ := run(t, c, s.data); got != s.want {
			t.Errorf("%s: verdict %#x, want %#x", s.name, got, s.want)
		}
	}
	got, err := c.UnparsedCounters()
	if err != nil {
		t.Fatal(err)
	}
	if want := (classifier.UnparsedStats{Judged: 1, Dropped: 3}); got != want {
		t.Errorf("counters of packets not parsed %+v, want %+v", got, want)
	}
}
