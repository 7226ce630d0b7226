// Package dnsname holds what the resolver of dnsName rules and the reader of DNS answers to
// pods agree on: the form names are compared in, and what an answer gives a name.
package dnsname

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// Canonical is the form names are compared in: lower case, no trailing dot.
func Canonical(name string) string { return strings.TrimSuffix(strings.ToLower(name), ".") }

// Answered are the addresses an answer gives name (A and AAAA records of name and of its CNAME
// chain, nothing else: an answer that carries others, a resolver's glue or a forged record, does
// not extend what the name allows), and the smallest TTL over the records used, CNAMEs
// included: the chain expires with its shortest link.
func Answered(name string, answer []dns.RR) ([]netip.Addr, uint32) {
	var addrs []netip.Addr
	ttl := uint32(1<<32 - 1)
	chain := cnameChain(dns.Fqdn(name), answer)
	for _, rr := range answer {
		if !chain[strings.ToLower(rr.Header().Name)] {
			continue
		}
		var ip netip.Addr
		switch v := rr.(type) {
		case *dns.A:
			ip, _ = netip.AddrFromSlice(v.A.To4())
		case *dns.AAAA:
			ip, _ = netip.AddrFromSlice(v.AAAA)
		case *dns.CNAME:
			ttl = min(ttl, rr.Header().Ttl)
			continue
		default:
			continue
		}
		if ip.IsValid() {
			addrs = append(addrs, ip)
			ttl = min(ttl, rr.Header().Ttl)
		}
	}
	return addrs, ttl
}

// cnameChain is the set of owner names (lower case, fully qualified) the answer for name
// reaches: name and the targets of the CNAMEs from it, followed in any order.
func cnameChain(name string, answer []dns.RR) map[string]bool {
	chain := map[string]bool{strings.ToLower(name): true}
	for grew := true; grew; {
		grew = false
		for _, rr := range answer {
			if c, ok := rr.(*dns.CNAME); ok && chain[strings.ToLower(c.Hdr.Name)] && !chain[strings.ToLower(c.Target)] {
				chain[strings.ToLower(c.Target)] = true
				grew = true
			}
		}
	}
	return chain
}
