package dnsanswers

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// answer is a DNS answer for name with the records given.
func answer(t *testing.T, name string, qtype uint16, rrs ...string) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.Response = true
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		m.Answer = append(m.Answer, rr)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// udp4 wraps payload in IPv4 and UDP headers to pod4 (checksums are not read).
func udp4(payload []byte) []byte {
	p := make([]byte, 28+len(payload))
	p[0], p[9] = 0x45, 17
	copy(p[16:20], pod4.AsSlice())
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	binary.BigEndian.PutUint16(p[20:], 53)
	binary.BigEndian.PutUint16(p[24:], uint16(8+len(payload)))
	copy(p[28:], payload)
	return p
}

// The pods the test answers go to.
var pod4, pod6 = netip.MustParseAddr("10.244.0.5"), netip.MustParseAddr("fd00:10:244::5")

// tcp6 wraps payload, after its length, in IPv6 and TCP headers to pod6; cut drops its last
// bytes (a message continued in the next segment).
func tcp6(payload []byte, cut int) []byte {
	seg := binary.BigEndian.AppendUint16(nil, uint16(len(payload)))
	seg = append(seg, payload[:len(payload)-cut]...)
	p := make([]byte, 60+len(seg))
	p[0], p[6] = 0x60, 6
	copy(p[24:40], pod6.AsSlice())
	binary.BigEndian.PutUint16(p[4:], uint16(20+len(seg)))
	binary.BigEndian.PutUint16(p[40:], 53)
	p[52] = 5 << 4
	copy(p[60:], seg)
	return p
}

type learner struct {
	want    []string
	learned map[string][]netip.Addr
	ttl     time.Duration
}

func (l *learner) Wants(name string) bool { return slices.Contains(l.want, name) }
func (l *learner) Learn(_, name string, addrs []netip.Addr, ttl time.Duration) (uint64, bool) {
	l.learned[name], l.ttl = addrs, ttl
	return 1, true
}
func (l *learner) WaitApplied(context.Context, uint64) error { return nil }

// What an answer teaches: the addresses of the question's name through its CNAME chain, over
// UDP and over TCP (in one segment), IPv4 and IPv6, to the pod it goes to; nothing from an
// answer for a name no rule wants, from records of other names, from a question, nor from half
// a TCP message.
func TestWhatAnAnswerTeaches(t *testing.T) {
	cdn := answer(t, "www.example.com", dns.TypeA,
		"www.example.com. 300 IN CNAME edge.cdn.net.",
		"edge.cdn.net. 20 IN A 192.0.2.7",
		"glue.other.net. 999 IN A 198.51.100.1")
	v6 := answer(t, "api.example.com", dns.TypeAAAA, "api.example.com. 60 IN AAAA 2001:db8::7")
	for _, c := range []struct {
		name   string
		packet []byte
		want   []netip.Addr
		ttl    uint32
		pod    netip.Addr
	}{
		{"UDP, through a CNAME, not the glue", udp4(cdn), []netip.Addr{netip.MustParseAddr("192.0.2.7")}, 20, pod4},
		{"TCP over IPv6", tcp6(v6, 0), []netip.Addr{netip.MustParseAddr("2001:db8::7")}, 60, pod6},
		{"a name no rule wants", udp4(answer(t, "other.example.com", dns.TypeA, "other.example.com. 60 IN A 192.0.2.8")), nil, 0, pod4},
		{"half a TCP message (its end to come)", tcp6(v6, 5), nil, 0, netip.Addr{}},
	} {
		l := &learner{want: []string{"www.example.com", "api.example.com"}, learned: map[string][]netip.Addr{}}
		r := &Reader{Learner: l}
		msgs, pod, err := r.messages(c.packet)
		if pod != c.pod {
			t.Errorf("%s: to pod %v, want %v", c.name, pod, c.pod)
		}
		var got []netip.Addr
		var ttl uint32
		if err == nil && len(msgs) == 1 {
			var ok bool
			var name string
			if name, got, ttl, ok = r.wanted(msgs[0]); ok && !slices.Contains(l.want, name) {
				t.Errorf("%s: learned for %s", c.name, name)
			}
		}
		if !slices.Equal(got, c.want) || ttl != c.ttl {
			t.Errorf("%s: %v (TTL %d), want %v (TTL %d); parse error %v", c.name, got, ttl, c.want, c.ttl, err)
		}
	}
	q := new(dns.Msg)
	q.SetQuestion("www.example.com.", dns.TypeA)
	qb, _ := q.Pack()
	r := &Reader{Learner: &learner{want: []string{"www.example.com"}}}
	msgs, _, err := r.messages(udp4(qb))
	if err != nil || len(msgs) != 1 {
		t.Fatal(msgs, err)
	}
	if _, _, _, ok := r.wanted(msgs[0]); ok {
		t.Error("a question taught something")
	}
}

// A DNS message over TCP is read once its last segment comes, however it was cut; a gap drops
// what was gathered; two messages in one segment are both read.
func TestTCPMessagesOverSegments(t *testing.T) {
	msg := answer(t, "api.example.com", dns.TypeAAAA, "api.example.com. 60 IN AAAA 2001:db8::7")
	framed := binary.BigEndian.AppendUint16(nil, uint16(len(msg)))
	framed = append(framed, msg...)
	now := time.Now()
	var s streams
	if got := s.add("c1", 1000, framed[:1], now); len(got) != 0 {
		t.Fatalf("one byte: %d messages", len(got))
	}
	if got := s.add("c1", 1001, framed[1:10], now); len(got) != 0 {
		t.Fatalf("ten bytes: %d messages", len(got))
	}
	if got := s.add("c1", 1010, framed[10:], now); len(got) != 1 || string(got[0]) != string(msg) {
		t.Fatalf("the last segment: %d messages", len(got))
	}
	if len(s.byFlow) != 0 {
		t.Errorf("%d connections kept after a whole message", len(s.byFlow))
	}
	s.add("c2", 5000, framed[:10], now)
	if got := s.add("c2", 5020, framed[10:], now); len(got) != 0 { // 10 bytes lost
		t.Fatalf("after a gap: %d messages", len(got))
	}
	two := append(append([]byte{}, framed...), framed...)
	if got := s.add("c3", 1, two, now); len(got) != 2 {
		t.Fatalf("two in one segment: %d messages", len(got))
	}
	for i := range maxStreams + 10 {
		s.add(flowKey(fmt.Sprint("busy", i)), 1, framed[:5], now.Add(time.Duration(i)))
	}
	if len(s.byFlow) > maxStreams {
		t.Errorf("%d connections kept, at most %d", len(s.byFlow), maxStreams)
	}
}
