package routing

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedGatewayChangesKeepTheOtherFlows: 40 UDP flows (5-tuple hash) marked into an
// ECMP route over gw1, gw2 and gw3, all BFD-gated (a resilient group). When gw3's session goes
// down, its flows move to the others and no flow of gw1 or gw2 moves; when it comes back, it
// takes back its share of the buckets (idle ones first, busy ones after 1 s unbalanced) and new
// flows reach it, while flows move only to it, never between gw1 and gw2:
// stateful gateways keep their connections, as upstream asks of a gateway added or removed.
// The same gateways without BFD get a plain group (the kernel then skips a member whose
// neighbour failed, which a resilient group would not).
func TestPrivilegedGatewayChangesKeepTheOtherFlows(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	if err := l.r.Script("sysctl -qw net.ipv4.fib_multipath_hash_policy=1"); err != nil {
		t.Fatal(err)
	}
	r := l.router(t)
	gw := func(i int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("10.1.%d.2", i)) }
	s := &dataplane.RoutingState{
		Rules: []dataplane.RouteRule{{Origin: origin1, Priority: 10, Mark: 0x100, Mask: 0xff00, Table: 0}},
		Tables: []dataplane.RouteTable{{Origin: origin1, ID: 0, Routes: []dataplane.Route{{Dst: netip.MustParsePrefix(dst4 + "/32"),
			Nexthops: []dataplane.Nexthop{{Gateway: gw(1), BFD: true}, {Gateway: gw(2), BFD: true}, {Gateway: gw(3), BFD: true}}}}}},
	}
	down := map[netip.Addr]bool{}
	apply := func() {
		t.Helper()
		if errs := r.Apply(s, func(p netip.Addr) bool { return !down[p] }); len(errs) != 0 {
			t.Fatal(errs)
		}
		if err := r.Prune(s); err != nil {
			t.Fatal(err)
		}
	}
	// where sends one datagram of each flow (its source port) and returns the gateway that
	// received it.
	where := func(base int) map[int]int {
		t.Helper()
		out := map[int]int{}
		for port := base; port < base+40; port++ {
			var before [4]int
			for i := 1; i <= 3; i++ {
				before[i], _ = l.received(t, i)
			}
			if err := l.r.Do(func() error { return sendMarked(port, 0x100) }); err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 3; i++ {
				if n, _ := l.received(t, i); n > before[i] {
					out[port] = i
				}
			}
		}
		return out
	}
	apply()
	all := where(40000)
	per := map[int]int{}
	for _, g := range all {
		per[g]++
	}
	if len(all) != 40 || per[1] == 0 || per[2] == 0 || per[3] == 0 {
		t.Fatalf("40 flows over three gateways: %d arrived, %v per gateway", len(all), per)
	}
	down[gw(3)] = true
	apply()
	without := where(40000)
	for port, g := range all {
		switch {
		case g != 3 && without[port] != g:
			t.Errorf("gw3 down: flow %d moved from gw%d to gw%d", port, g, without[port])
		case g == 3 && without[port] != 1 && without[port] != 2:
			t.Errorf("gw3 down: flow %d of gw3 went to gw%d", port, without[port])
		}
	}
	clear(down)
	apply()
	time.Sleep(2500 * time.Millisecond) // the group's unbalanced timer (1 s), and the kernel's periodic work
	back := where(40000)
	returned := 0
	for port, g := range without {
		switch {
		case back[port] == 3:
			returned++
		case back[port] != g:
			t.Errorf("gw3 back: flow %d moved from gw%d to gw%d", port, g, back[port])
		}
	}
	// It took back its share of the buckets (the kernel moves idle ones first): new flows reach
	// it.
	fresh := map[int]int{}
	for _, g := range where(41000) {
		fresh[g]++
	}
	if fresh[3] == 0 {
		t.Errorf("gw3 back: none of 40 new flows reach it 2.5 s later (%v)\n%s", fresh, l.ip(t, "nexthop"))
	}
	t.Logf("flows per gateway: %v; %d moved off gw3 when it went, %d to it when it came back, none between gw1 and gw2; new flows %v",
		per, per[3], returned, fresh)

	for i := range s.Tables[0].Routes[0].Nexthops {
		s.Tables[0].Routes[0].Nexthops[i].BFD = false
	}
	apply()
	route := l.ip(t, "route", "show", "table", "7100", dst4)
	var id int
	if _, err := fmt.Sscanf(route, dst4+" nhid %d", &id); err != nil {
		t.Fatalf("table 7100: %q", route)
	}
	if group := l.ip(t, "nexthop", "show", "id", fmt.Sprint(id)); strings.Contains(group, "resilient") {
		t.Errorf("without BFD, the route's group: %q, want a plain one", group)
	}
}

// sendMarked sends one UDP datagram to dst4 from 10.1.1.1 and source port port, with the
// socket mark. The source is fixed: one the kernel picked would depend on the member the first
// lookup chose, and so would the flow's hash, as it never does for a pod's forwarded packet.
func sendMarked(port int, mark uint32) error {
	d := net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP("10.1.1.1"), Port: port}, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark)),
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1))
		})
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("udp4", dst4+":9")
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte("x"))
	return err
}

// TestPrivilegedEarlierGroupsBecomeResilient: an ECMP route of an earlier agent, on a group
// that is not resilient, moves to a resilient group of the same members, in place (the route
// is replaced, never removed), and the old group goes.
func TestPrivilegedEarlierGroupsBecomeResilient(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	if err := l.r.Script("ip nexthop add id 71000000 via 10.1.1.2 dev e1 proto 229",
		"ip nexthop add id 71000001 via 10.1.2.2 dev e2 proto 229",
		"ip nexthop add id 71000002 group 71000000/71000001 proto 229",
		"ip route add "+dst4+"/32 nhid 71000002 table 7101 proto 229",
		"ip rule add priority 6111 fwmark 0x200/0xff00 lookup 7101 proto 229"); err != nil {
		t.Fatal(err)
	}
	r := l.router(t)
	s := testState()
	if errs := r.Apply(s, nil); len(errs) != 0 {
		t.Fatal(errs)
	}
	if err := r.Prune(s); err != nil {
		t.Fatal(err)
	}
	route := l.ip(t, "route", "show", "table", "7101", dst4)
	var id int
	if _, err := fmt.Sscanf(route, dst4+" nhid %d", &id); err != nil || id == 71000002 {
		t.Fatalf("table 7101: %q, want %s on a new group", route, dst4)
	}
	group := resilientParams.ReplaceAllString(l.ip(t, "nexthop", "show", "id", fmt.Sprint(id)), " type resilient")
	if want := fmt.Sprintf("id %d group 71000000/71000001 type resilient proto 229", id); group != want {
		t.Errorf("the route's group: %q, want %q", group, want)
	}
	if out, err := l.r.Run("ip", "nexthop", "show", "id", "71000002"); err == nil {
		t.Errorf("the earlier group is still there: %s", out)
	}
	if !l.ping(t, false, 0x200) {
		t.Error("a ping marked for table 7101 got no answer")
	}
}
