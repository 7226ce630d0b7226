package dnsanswers

import (
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// A DNS answer's content is chosen by whoever serves the name a pod asked (any domain's owner),
// and a TCP stream's segments by the path: whatever the packets, reading them never panics, the
// connections gathered stay bounded, and what is learned is only addresses of a wanted name.
func FuzzMessages(f *testing.F) {
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	m.Response = true
	rr, _ := dns.NewRR("www.example.com. 60 IN A 192.0.2.7")
	m.Answer = append(m.Answer, rr)
	msg, _ := m.Pack()
	f.Add(udp4(msg), uint8(0))
	f.Add(tcp6(msg, 0), uint8(0))
	f.Add(tcp6(msg, 5), uint8(3))
	f.Add([]byte{0x45}, uint8(1))
	f.Fuzz(func(t *testing.T, packet []byte, flows uint8) {
		l := &learner{want: []string{"www.example.com"}, learned: map[string][]netip.Addr{}}
		r := &Reader{Learner: l}
		for i := range int(flows%8) + 1 {
			if len(packet) > 0 {
				packet[0] ^= byte(i) & 0x0f // other lengths and versions from the same bytes
			}
			msgs, _, _ := r.messages(packet)
			for _, m := range msgs {
				if name, addrs, ttl, ok := r.wanted(m); ok {
					r.Learner.Learn("ns", name, addrs, time.Duration(ttl)*time.Second)
				}
			}
		}
		if len(r.streams.byFlow) > maxStreams {
			t.Fatalf("%d connections gathered", len(r.streams.byFlow))
		}
		for name := range l.learned {
			if name != "www.example.com" {
				t.Fatalf("learned for %q", name)
			}
		}
	})
}
