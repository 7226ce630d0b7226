package routing

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/rpfilter"
	"github.com/egressd/egressd/test/netns"
)

// lab is a router namespace (where egressd programs routing) with three gateway namespaces,
// gw1..gw3 on links e1..e3 (10.1.N.0/24, fd01:N::/64; the router is .1, the gateway .2). Every
// gateway owns the destination 203.0.113.5 / 2001:db8:5::5 and counts what it receives for it;
// gw3 is the main table's default gateway.
type lab struct {
	r   *netns.NS
	gws [4]*netns.NS // 1..3
}

const (
	dst4 = "203.0.113.5"
	dst6 = "2001:db8:5::5"
)

func newLab(t *testing.T) *lab {
	t.Helper()
	// No duplicate address detection, link-local addresses included: neighbour discovery
	// works from the first packet.
	noDAD := "sysctl -qw net.ipv6.conf.default.accept_dad=0"
	l := &lab{r: netns.New(t, "rt")}
	if err := l.r.Script(noDAD); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		gw := netns.New(t, fmt.Sprintf("gw%d", i))
		l.gws[i] = gw
		if err := gw.Script(noDAD); err != nil {
			t.Fatal(err)
		}
		netns.Veth(t, l.r, fmt.Sprintf("e%d", i), gw, "e0")
		l.r.Addr(t, fmt.Sprintf("e%d", i), fmt.Sprintf("10.1.%d.1/24", i), fmt.Sprintf("fd01:%d::1/64", i))
		gw.Addr(t, "e0", fmt.Sprintf("10.1.%d.2/24", i), fmt.Sprintf("fd01:%d::2/64", i))
		gw.Addr(t, "lo", dst4+"/32", dst6+"/128")
		// The router picks a source address before it picks an ECMP member, so a gateway may
		// see any of the router's addresses: route them all back.
		if err := gw.Script(fmt.Sprintf("ip route add 10.1.0.0/16 via 10.1.%d.1", i), fmt.Sprintf("ip -6 route add fd01::/16 via fd01:%d::1", i)); err != nil {
			t.Fatal(err)
		}
		cmd := gw.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader("table inet egt {\n chain pre {\n  type filter hook prerouting priority 0\n" +
			"  ip daddr " + dst4 + " counter\n  ip6 daddr " + dst6 + " counter\n }\n}\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft: %v: %s", err, out)
		}
	}
	if err := l.r.Script("ip route add default via 10.1.3.2", "ip -6 route add default via fd01:3::2"); err != nil {
		t.Fatal(err)
	}
	return l
}

var counterRE = regexp.MustCompile(`daddr (\S+) counter packets (\d+)`)

// received returns how many packets gateway i received for dst4 and dst6.
func (l *lab) received(t *testing.T, i int) (v4, v6 int) {
	t.Helper()
	for _, m := range counterRE.FindAllStringSubmatch(l.gws[i].MustRun(t, "nft", "list", "table", "inet", "egt"), -1) {
		n, _ := strconv.Atoi(m[2])
		if m[1] == dst4 {
			v4 = n
		} else {
			v6 = n
		}
	}
	return v4, v6
}

// router creates a Router inside the lab's router namespace.
func (l *lab) router(t *testing.T) *Router {
	t.Helper()
	var r *Router
	if err := l.r.Do(func() (err error) { r, err = New(Config{}); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// strictReplyInterfaces are r.ReplyInterfaces whose reverse path filter is strict, by name,
// read in the router namespace (sysctls are per namespace).
func (l *lab) strictReplyInterfaces(t *testing.T, r *Router) (out []string) {
	t.Helper()
	if err := l.r.Do(func() error {
		m, complete := r.ReplyInterfaces(rpfilter.Strict)
		if !complete {
			return errors.New("ReplyInterfaces: incomplete")
		}
		out = slices.Sorted(maps.Values(m))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// replyInterfaces6 are r.ReplyInterfaces6 by name, the marked ones with a "+".
func (l *lab) replyInterfaces6(t *testing.T, r *Router) (out []string) {
	t.Helper()
	if err := l.r.Do(func() error {
		m, marked, complete := r.ReplyInterfaces6()
		if !complete {
			return errors.New("ReplyInterfaces6: incomplete")
		}
		for index, name := range m {
			if marked[index] {
				name += "+"
			}
			out = append(out, name)
		}
		slices.Sort(out)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// ip runs iproute2 in the router namespace and returns its output without trailing spaces.
func (l *lab) ip(t *testing.T, args ...string) string {
	t.Helper()
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(l.r.MustRun(t, "ip", args...)), "\n") {
		lines = append(lines, strings.TrimRight(line, " "))
	}
	return strings.Join(lines, "\n")
}

var (
	origin0 = dataplane.Origin{Kind: "AdminPolicyBasedExternalRoute", Name: "via"}
	origin1 = dataplane.Origin{Kind: "AdminPolicyBasedExternalRoute", Name: "ecmp"}
	origin2 = dataplane.Origin{Kind: "EgressService", Namespace: "ns", Name: "drop"}
)

// testState selects table 7100 (default via gw1) with mark 0x100/0xff00, table 7101 (the
// destinations over gw1 and gw2, BFD-gated ECMP) with 0x200, table 7102 (blackhole) with 0x300;
// sources 10.9.0.0/16 and fd09::/64 use table 7100 too. Tables 0..2 are s.Tables[0..2] (IPv4)
// and s.Tables[3..5] (IPv6).
func testState() *dataplane.RoutingState {
	gw := func(i int, v6 bool) netip.Addr {
		if v6 {
			return netip.MustParseAddr(fmt.Sprintf("fd01:%d::2", i))
		}
		return netip.MustParseAddr(fmt.Sprintf("10.1.%d.2", i))
	}
	s := &dataplane.RoutingState{}
	for _, v6 := range []bool{false, true} {
		all, dst := netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix(dst4+"/32")
		if v6 {
			all, dst = netip.MustParsePrefix("::/0"), netip.MustParsePrefix(dst6+"/128")
		}
		for i, o := range []dataplane.Origin{origin0, origin1, origin2} {
			s.Rules = append(s.Rules, dataplane.RouteRule{Origin: o, Priority: 10 + i, IPv6: v6, Mark: uint32(i+1) << 8, Mask: 0xff00, Table: i})
		}
		src := netip.MustParsePrefix("10.9.0.0/16")
		if v6 {
			src = netip.MustParsePrefix("fd09::/64")
		}
		s.Rules = append(s.Rules, dataplane.RouteRule{Origin: origin0, Priority: 20, IPv6: v6, Src: src, Table: 0})
		s.Tables = append(s.Tables,
			dataplane.RouteTable{Origin: origin0, ID: 0, Routes: []dataplane.Route{{Dst: all, Via: &dataplane.Nexthop{Gateway: gw(1, v6)}}}},
			dataplane.RouteTable{Origin: origin1, ID: 1, Routes: []dataplane.Route{{Dst: dst, Nexthops: []dataplane.Nexthop{
				{Gateway: gw(1, v6), Device: "e1", BFD: true}, {Gateway: gw(2, v6), BFD: true}}}}},
			dataplane.RouteTable{Origin: origin2, ID: 2, Routes: []dataplane.Route{{Dst: all, Blackhole: true}}},
		)
	}
	return s
}
