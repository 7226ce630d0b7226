package dnsnames

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/test/poll"
)

// server is a DNS server on loopback whose answers the test sets.
type server struct {
	mu      sync.Mutex
	ttl     uint32
	ips     []string
	fail    bool
	queries int
	// cnameTTL, when set, answers through a CNAME (name -> target.example.) with this TTL.
	cnameTTL uint32
	// other adds an A record of another name to every answer; otherQuestion answers as if
	// asked about another name.
	other         string
	otherQuestion bool
}

func (s *server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queries++
	m := new(dns.Msg)
	m.SetReply(req)
	if s.fail {
		m.Rcode = dns.RcodeServerFailure
	}
	q := req.Question[0]
	owner := q.Name
	if s.cnameTTL != 0 && !s.fail {
		owner = "target.example."
		m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: s.cnameTTL}, Target: owner})
	}
	for _, ip := range s.ips {
		a := netip.MustParseAddr(ip)
		hdr := dns.RR_Header{Name: owner, Class: dns.ClassINET, Ttl: s.ttl}
		if q.Qtype == dns.TypeA && a.Is4() {
			hdr.Rrtype = dns.TypeA
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		}
		if q.Qtype == dns.TypeAAAA && a.Is6() {
			hdr.Rrtype = dns.TypeAAAA
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	if s.other != "" {
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: "other.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: s.ttl},
			A: netip.MustParseAddr(s.other).AsSlice()})
	}
	if s.otherQuestion {
		m.Question[0].Name = "other.example."
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp { // as servers do: TC set, the client asks over TCP
		size := dns.MinMsgSize
		if o := req.IsEdns0(); o != nil {
			size = int(o.UDPSize())
		}
		m.Truncate(size)
	}
	_ = w.WriteMsg(m)
}

func (s *server) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries
}

func (s *server) set(ttl uint32, fail bool, ips ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ttl, s.fail, s.ips = ttl, fail, ips
}

// serve runs s on a loopback port and returns its address.
func serve(t *testing.T, s *server) string {
	// UDP and TCP (for truncated answers) on one port: a free UDP port's TCP twin may be taken
	// (other tests' servers), so a pair is tried until both bind.
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pc, err := net.ListenPacket("udp", l.Addr().String())
		if err != nil {
			l.Close()
			continue
		}
		udp, tcp := &dns.Server{PacketConn: pc, Handler: s}, &dns.Server{Listener: l, Handler: s}
		go func() { _ = udp.ActivateAndServe() }()
		go func() { _ = tcp.ActivateAndServe() }()
		t.Cleanup(func() { _ = udp.Shutdown(); _ = tcp.Shutdown() })
		return l.Addr().String()
	}
	t.Fatal("no port free for both UDP and TCP")
	return ""
}

// start runs a resolver asking servers, in order, with short test timings.
func start(t *testing.T, servers ...*server) *Resolver {
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, serve(t, s))
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return startIn(t, ctx, addrs, "")
}

// startIn runs a resolver asking addrs until ctx ends, keeping its addresses in state, with
// short test timings.
func startIn(t testing.TB, ctx context.Context, addrs []string, state string) *Resolver {
	r := New(ctx, addrs, 0, state, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { <-r.Stopped() }) // before the state's directory is removed
	r.zeroTTL, r.retry, r.maxBackoff, r.retriesBeforeBackoff = 200*time.Millisecond, 100*time.Millisecond, 400*time.Millisecond, 2
	r.saveEvery = 0
	return r
}

func waitAddrs(t *testing.T, r *Resolver, name string, want ...string) {
	t.Helper()
	poll.Eventually(t, name+" resolved", 5*time.Second, func() error {
		var got []string
		for _, a := range r.Lookup(name) {
			got = append(got, a.String())
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("resolves to %v, want %v", got, want)
		}
		return nil
	})
}

func TestResolverRefreshesAtTTLAndKeepsAddressesOnFailure(t *testing.T) {
	s := &server{}
	s.set(1, false, "203.0.113.20", "2001:db8::20")
	r := start(t, s)
	r.Want([]string{"WWW.Example.COM."})
	waitAddrs(t, r, "www.example.com", "203.0.113.20", "2001:db8::20")
	select {
	case <-r.Changed():
	case <-time.After(time.Second):
		t.Fatal("no change signalled")
	}
	s.set(1, false, "203.0.113.21")
	start := time.Now()
	waitAddrs(t, r, "www.example.com", "203.0.113.21")
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Errorf("new answer seen after %s with a 1 s TTL", d)
	}
	// The server fails for longer than the TTL: the resolver keeps the last addresses, and keeps
	// asking, with a backoff capped at 400 ms (two queries per attempt).
	s.set(1, true)
	time.Sleep(1500 * time.Millisecond) // the outage under test, past the 1 s TTL and into the backoff
	if got := r.Lookup("www.example.com"); len(got) != 1 || got[0].String() != "203.0.113.21" {
		t.Errorf("after 1.5 s of failures the name resolves to %v, want the last addresses [203.0.113.21]", got)
	}
	before := s.count()
	time.Sleep(time.Second) // a window of the outage in which to count the retries
	retries := s.count() - before
	switch {
	case retries > 8:
		t.Errorf("%d queries in 1 s while failing: no backoff", retries)
	case retries < 2:
		t.Errorf("%d queries in 1 s while failing: the resolver stopped retrying (backoff capped at 400 ms)", retries)
	}
	if got := r.Lookup("www.example.com"); len(got) != 1 || got[0].String() != "203.0.113.21" {
		t.Errorf("after 2.5 s of failures the name resolves to %v, want the last addresses [203.0.113.21]", got)
	}
	// The server answers again: the next retry, at most 400 ms away, takes the new answer.
	s.set(1, false, "203.0.113.22")
	start = time.Now()
	waitAddrs(t, r, "www.example.com", "203.0.113.22")
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("recovery seen after %s with retries capped at 400 ms", d)
	}
	r.Want(nil)
	if len(r.Lookup("www.example.com")) != 0 {
		t.Error("unwanted name still resolved")
	}
}

// queriesIn counts the queries s gets during d.
func queriesIn(s *server, d time.Duration) int {
	before := s.count()
	time.Sleep(d) // the window in which refreshes are counted
	return s.count() - before
}

// The first nameserver fails: the second answers, and the name resolves.
func TestResolverAsksEveryNameserver(t *testing.T) {
	broken, good := &server{}, &server{}
	broken.set(30, true)
	good.set(30, false, "203.0.113.30")
	r := start(t, broken, good)
	r.Want([]string{"www.example.com"})
	waitAddrs(t, r, "www.example.com", "203.0.113.30")
	if broken.count() == 0 {
		t.Error("the first nameserver was never asked")
	}
}

// The refresh follows the smallest TTL of the chain: a CNAME of 1 s over addresses of 60 s is
// asked again about every second; a TTL of 0 is floored (200 ms in tests, 5 s by default), and
// the operator's minimum holds over a short TTL.
func TestResolverTTLs(t *testing.T) {
	chain := &server{cnameTTL: 1}
	chain.set(60, false, "203.0.113.40")
	r := start(t, chain)
	r.Want([]string{"www.example.com"})
	waitAddrs(t, r, "www.example.com", "203.0.113.40")
	if n := queriesIn(chain, 2500*time.Millisecond); n < 2*2 || n > 4*2 { // A and AAAA per refresh
		t.Errorf("%d queries in 2.5 s with a 1 s CNAME TTL, want 2 or 3 refreshes (2 queries each)", n)
	}

	zero := &server{}
	zero.set(0, false, "203.0.113.41")
	r = start(t, zero)
	r.Want([]string{"www.example.com"})
	waitAddrs(t, r, "www.example.com", "203.0.113.41")
	if n := queriesIn(zero, time.Second); n < 3*2 || n > 6*2 {
		t.Errorf("%d queries in 1 s with TTL 0 floored to 200 ms, want about 5 refreshes", n)
	}

	floored := &server{}
	floored.set(1, false, "203.0.113.42")
	r = start(t, floored)
	r.minTTL = 2 * time.Second
	r.Want([]string{"www.example.com"})
	waitAddrs(t, r, "www.example.com", "203.0.113.42")
	if n := queriesIn(floored, 2500*time.Millisecond); n > 2*2 {
		t.Errorf("%d queries in 2.5 s with a 2 s minimum over a 1 s TTL, want 1 refresh at most", n)
	}
}

// Only the asked name's records (and its CNAME chain's) count: an extra address of another name
// in the answer is not allowed by the rule; an answer to another question is no answer; a name
// with more than MaxAddresses addresses keeps MaxAddresses.
func TestResolverTakesOnlyTheAnswerToItsQuestion(t *testing.T) {
	glue := &server{cnameTTL: 60, other: "198.51.100.66"}
	glue.set(60, false, "203.0.113.50")
	r := start(t, glue)
	r.Want([]string{"www.example.com"})
	waitAddrs(t, r, "www.example.com", "203.0.113.50")

	liar := &server{otherQuestion: true}
	liar.set(60, false, "198.51.100.67")
	honest := &server{}
	honest.set(60, false, "203.0.113.51")
	r = start(t, liar, honest)
	r.Want([]string{"www.example.com"})
	waitAddrs(t, r, "www.example.com", "203.0.113.51")

	var many []string
	for i := range MaxAddresses + 10 {
		many = append(many, fmt.Sprintf("10.9.%d.%d", i/250, i%250+1))
	}
	big := &server{}
	big.set(60, false, many...)
	r = start(t, big)
	r.Want([]string{"www.example.com"})
	poll.Eventually(t, "www.example.com resolved", 20*time.Second, func() error { // a retry after a slow first answer, under load
		if n := len(r.Lookup("www.example.com")); n != MaxAddresses {
			return fmt.Errorf("%d addresses, want %d", n, MaxAddresses)
		}
		return nil
	})
}
