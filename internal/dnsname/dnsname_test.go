package dnsname

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func TestCanonical(t *testing.T) {
	for in, want := range map[string]string{"WWW.TEST.COM": "www.test.com", "a.b.": "a.b", "x": "x"} {
		if got := Canonical(in); got != want || strings.ToLower(got) != got {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
}

// The name's records and its CNAME chain's count, in any order and case; another name's
// address does not; the TTL is the chain's shortest.
func TestAnswered(t *testing.T) {
	var answer []dns.RR
	for _, s := range []string{
		"cdn.example.net. 30 IN A 192.0.2.7",
		"WWW.example.com. 300 IN CNAME edge.example.org.",
		"edge.example.org. 60 IN CNAME cdn.example.net.",
		"cdn.example.net. 30 IN AAAA 2001:db8::7",
		"glue.example.com. 10 IN A 198.51.100.66",
	} {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		answer = append(answer, rr)
	}
	addrs, ttl := Answered("www.example.com", answer)
	want := []netip.Addr{netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("2001:db8::7")}
	if !slices.Equal(addrs, want) || ttl != 30 {
		t.Errorf("Answered = %v, TTL %d; want %v, TTL 30", addrs, ttl, want)
	}
	if addrs, _ := Answered("other.example.com", answer); len(addrs) != 0 {
		t.Errorf("an answer for another name gave %v", addrs)
	}
}
