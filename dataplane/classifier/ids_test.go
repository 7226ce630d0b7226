package classifier

import (
	"net/netip"
	"testing"

	"github.com/egressd/egressd/bpf"
	"github.com/egressd/egressd/dataplane"
)

// TestIDStableAndUnique: a name's id is the same in every agent (a restarted one's entries
// line up with the pinned ones), never 0 (none) nor with the IPv6 key bit; a name whose id
// another name holds gets another id, and keeps it when asked again.
func TestIDStableAndUnique(t *testing.T) {
	first := ID("fw/team-a", map[uint32]string{})
	if again := ID("fw/team-a", map[uint32]string{}); again != first {
		t.Errorf("id %d in one agent, %d in another", first, again)
	}
	taken := map[uint32]string{first: "fw/other"}
	salted := ID("fw/team-a", taken)
	if salted == first || taken[salted] != "fw/team-a" || taken[first] != "fw/other" {
		t.Errorf("a colliding name got %d (taken %v), want another id than %d", salted, taken, first)
	}
	if again := ID("fw/team-a", taken); again != salted {
		t.Errorf("asked again: %d, want %d", again, salted)
	}
	for _, id := range []uint32{first, salted} {
		if id == 0 || id&lpmIDv6 != 0 {
			t.Errorf("id %#x is 0 or carries the IPv6 bit", id)
		}
	}
}

// TestClassIDsByRuleSet: pods of a namespace selected by the same QoS rules share a class, by
// another set another; a class is told from the namespace's own id, and its namespace is
// recorded (for the counters' names).
func TestClassIDsByRuleSet(t *testing.T) {
	a := newIDs()
	c1, c2, c3 := a.class("ns", []int{0, 2}), a.class("ns", []int{0, 2}), a.class("ns", []int{0, 12})
	if c1 != c2 || c1 == c3 {
		t.Errorf("classes %d, %d, %d: want the first two equal, the third apart", c1, c2, c3)
	}
	if ns := a.namespace("ns"); uint32(ns) == uint32(c1) || uint32(ns) == uint32(c3) {
		t.Errorf("the namespace's id %d is a class's", ns)
	}
	if a.classes[c3] != "ns" || a.namespaces[a.namespace("ns")] != "ns" {
		t.Errorf("classes %v, namespaces %v: want ns recorded", a.classes, a.namespaces)
	}
}

// TestKeys: the program's LPM keys match the prefix length past the id (32 bits more; the
// ports table 32 more for protocol and port), IPv6 keys carry the IPv6 bit in the id (a /0 of
// one family never matches the other), ports are in network byte order, and prefixes lose
// their host bits.
func TestKeys(t *testing.T) {
	k4 := lpmKey(nsID(7), netip.MustParsePrefix("192.0.2.0/24"))
	if k4.Prefixlen != 56 || k4.Id != 7 || [4]byte(k4.Ip[:4]) != [4]byte{192, 0, 2, 0} {
		t.Errorf("IPv4 key %+v", k4)
	}
	k6 := lpmKey(qosClass(7), netip.MustParsePrefix("::/0"))
	if k6.Prefixlen != 32 || k6.Id != 7|lpmIDv6 || lpmID(k6) != 7 {
		t.Errorf("IPv6 key %+v (id %d)", k6, lpmID(k6))
	}
	pk := portKey(nsID(7), PortPrefix{Port: dataplane.Port{Protocol: 6, Port: 443}, Prefix: netip.MustParsePrefix("2001:db8::/32")})
	if pk.Prefixlen != 96 || pk.Id != 7|lpmIDv6 || pk.Proto != 6 || pk.Port != 0xbb01 || pk.Ip[3] != 0xb8 {
		t.Errorf("port key %+v", pk)
	}
	if ck := prefixKey(netip.MustParsePrefix("10.244.1.7/16")); ck.Prefixlen != 48 || ck.Dst != addrOf(netip.MustParseAddr("10.244.0.0")) {
		t.Errorf("cluster key %+v", ck)
	}
	if fk := frontendKey(dataplane.Frontend{Addr: netip.MustParseAddr("fd00::5"), Port: dataplane.Port{Protocol: 17, Port: 53}}); fk.Port != 0x3500 || fk.Dst.Family != 6 {
		t.Errorf("frontend key %+v", fk)
	}
}

// TestNamesAreNULTerminated: a namespace name or rule text longer than its map value is cut so
// that a NUL ends it (the program and egressctl read C strings).
func TestNamesAreNULTerminated(t *testing.T) {
	n := nameOf("a-namespace-name-that-is-much-longer-than-the-sixty-four-bytes-a-map-value-holds")
	if n.S[len(n.S)-1] != 0 || n.S[len(n.S)-2] == 0 || n.S[0] != 'a' {
		t.Errorf("name %q: want it cut, NUL-terminated", n.S)
	}
	var text bpf.FromPodRuleText
	for i := range text.S {
		text.S[i] = 'x'
	}
	r := ruleText(string(text.S[:]))
	if r.S[len(r.S)-1] != 0 || r.S[len(r.S)-2] != 'x' {
		t.Errorf("rule text not NUL-terminated")
	}
}
