package lab

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// DNS is an authoritative server on an external host whose answers and TTLs a test controls,
// and which counts the queries it gets (to observe refreshes).
type DNS struct {
	Addr    netip.Addr
	mu      sync.Mutex
	records map[string]dnsRecord // by lower-case FQDN
	queries map[string]int
	servers []*dns.Server
}

type dnsRecord struct {
	ttl    uint32
	ips    []netip.Addr
	cname  string // when set, the name is an alias of this one (FQDN)
	rotate bool   // each answer gives one address of ips per family, the next one each time
	next   [2]int // per family (IPv4, IPv6)
}

// AddDNS adds an external host serving DNS (UDP and TCP 53) on addr.
func (l *Lab) AddDNS(name, addr string) (*DNS, error) {
	e, err := l.AddExternal(name, ExternalOptions{}, addr)
	if err != nil {
		return nil, err
	}
	d := &DNS{Addr: netip.MustParseAddr(addr), records: map[string]dnsRecord{}, queries: map[string]int{}}
	for _, proto := range []string{"udp", "tcp"} {
		srv := &dns.Server{Net: proto, Handler: d}
		err := e.NS.Do(func() error {
			hp := net.JoinHostPort(addr, "53")
			if proto == "udp" {
				pc, err := net.ListenPacket("udp", hp)
				srv.PacketConn = pc
				return err
			}
			ln, err := net.Listen("tcp", hp)
			srv.Listener = ln
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("DNS on %s: %w", name, err)
		}
		d.servers = append(d.servers, srv)
		go func() { _ = srv.ActivateAndServe() }()
		l.onClose(func() { _ = srv.Shutdown() })
	}
	return d, nil
}

// Set makes name resolve to ips (A and AAAA by family) with ttl seconds; no ips removes it.
func (d *DNS) Set(name string, ttl uint32, ips ...string) {
	r := dnsRecord{ttl: ttl}
	for _, ip := range ips {
		r.ips = append(r.ips, netip.MustParseAddr(ip))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.records[dns.CanonicalName(name)] = r
}

// SetRotating makes name resolve, at each query, to the next address of pool of the question's
// family only (as object stores, CDNs and geo-DNS answer a moment apart), with ttl seconds.
func (d *DNS) SetRotating(name string, ttl uint32, pool ...string) {
	d.Set(name, ttl, pool...)
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.records[dns.CanonicalName(name)]
	r.rotate = true
	d.records[dns.CanonicalName(name)] = r
}

// SetCNAME makes name an alias of target with ttl seconds: answers hold the CNAME record, then
// target's addresses with target's TTL.
func (d *DNS) SetCNAME(name string, ttl uint32, target string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.records[dns.CanonicalName(name)] = dnsRecord{ttl: ttl, cname: dns.CanonicalName(target)}
}

// rotate is the next address of owner's pool in the family asked. d.mu held.
func (d *DNS) rotate(owner string, v6 bool) []netip.Addr {
	r := d.records[strings.ToLower(owner)]
	var pool []netip.Addr
	for _, ip := range r.ips {
		if ip.Is6() == v6 {
			pool = append(pool, ip)
		}
	}
	if len(pool) == 0 {
		return nil
	}
	f := 0
	if v6 {
		f = 1
	}
	ip := pool[r.next[f]%len(pool)]
	r.next[f]++
	d.records[strings.ToLower(owner)] = r
	return []netip.Addr{ip}
}

// Stop shuts the server down: its host answers queries with ICMP port unreachable, as a
// resolver whose daemon died.
func (d *DNS) Stop() {
	for _, s := range d.servers {
		_ = s.Shutdown()
	}
}

// Queries returns how many questions (any type) name got.
func (d *DNS) Queries(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.queries[dns.CanonicalName(name)]
}

// ServeDNS answers A and AAAA questions from the records; unknown names get NXDOMAIN.
func (d *DNS) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	d.mu.Lock()
	for _, q := range req.Question {
		name := strings.ToLower(q.Name)
		d.queries[name]++
		r, ok := d.records[name]
		owner := q.Name
		if ok && r.cname != "" {
			m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: r.ttl}, Target: r.cname})
			owner = r.cname
			r, ok = d.records[r.cname]
		}
		if !ok {
			m.Rcode = dns.RcodeNameError
			continue
		}
		hdr := dns.RR_Header{Name: owner, Class: dns.ClassINET, Ttl: r.ttl}
		ips := r.ips
		if r.rotate {
			ips = d.rotate(owner, q.Qtype == dns.TypeAAAA)
		}
		for _, ip := range ips {
			switch {
			case q.Qtype == dns.TypeA && ip.Is4():
				hdr.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: ip.AsSlice()})
			case q.Qtype == dns.TypeAAAA && ip.Is6():
				hdr.Rrtype = dns.TypeAAAA
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: ip.AsSlice()})
			}
		}
	}
	d.mu.Unlock()
	_ = w.WriteMsg(m)
}

// Lookup asks server (ip) for name's records of qtype (dns.TypeA, dns.TypeAAAA) from inside the
// pod, over UDP, returning the addresses and the TTL of the first answer.
func (p *Pod) Lookup(server netip.Addr, name string, qtype uint16) ([]netip.Addr, uint32, error) {
	return p.LookupOver("udp", server, name, qtype)
}

// LookupOver is Lookup over network "udp" or "tcp".
func (p *Pod) LookupOver(network string, server netip.Addr, name string, qtype uint16) ([]netip.Addr, uint32, error) {
	var conn net.Conn
	if err := p.NS.Do(func() error {
		var err error
		conn, err = net.DialTimeout(network, netip.AddrPortFrom(server, 53).String(), 5*time.Second)
		return err
	}); err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	resp, _, err := (&dns.Client{Net: network}).ExchangeWithConn(m, &dns.Conn{Conn: conn})
	if err != nil {
		return nil, 0, err
	}
	if resp.Rcode != dns.RcodeSuccess {
		return nil, 0, fmt.Errorf("%s: %s", name, dns.RcodeToString[resp.Rcode])
	}
	var ips []netip.Addr
	var ttl uint32
	for i, rr := range resp.Answer {
		if i == 0 {
			ttl = rr.Header().Ttl
		}
		switch v := rr.(type) {
		case *dns.A:
			a, _ := netip.AddrFromSlice(v.A.To4())
			ips = append(ips, a)
		case *dns.AAAA:
			a, _ := netip.AddrFromSlice(v.AAAA)
			ips = append(ips, a)
		}
	}
	return ips, ttl, nil
}
