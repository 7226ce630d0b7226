package nft_test

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/nft"
	"github.com/egressd/egressd/internal/golden"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

func deny(ns string, rule int, pod, backend string, proto uint8, port uint16) dataplane.BackendDeny {
	return dataplane.BackendDeny{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: ns, Name: "default", Rule: rule},
		Pod: netip.MustParseAddr(pod), Backend: netip.MustParseAddr(backend), Protocol: proto, Port: port}
}

// fullState has every kind of element, IPv4 and IPv6.
func fullState() *dataplane.NftablesState {
	eip := dataplane.Origin{Kind: "EgressIP", Name: "eip-a"}
	a := netip.MustParseAddr
	return &dataplane.NftablesState{
		BackendDenies: []dataplane.BackendDeny{
			deny("a", 1, "10.244.0.5", "203.0.113.10", 6, 80),
			deny("a", 1, "10.244.0.5", "203.0.113.10", 17, 53),
			deny("a", 2, "fd00:10:244::5", "2001:db8::10", 132, 9),
		},
		BackendDSCP: []dataplane.BackendDSCP{
			{Origin: dataplane.Origin{Kind: "EgressQoS", Namespace: "a", Name: "default"}, Pod: a("10.244.0.5"), Backend: a("198.51.100.20"), Protocol: 6, Port: 443, DSCP: 46},
			{Origin: dataplane.Origin{Kind: "EgressQoS", Namespace: "a", Name: "default", Rule: 1}, Pod: a("10.244.0.6"), Backend: a("198.51.100.20"), Protocol: 6, Port: 443, DSCP: 10},
			{Origin: dataplane.Origin{Kind: "EgressQoS", Namespace: "a", Name: "default"}, Pod: a("fd00:10:244::5"), Backend: a("2001:db8::20"), Protocol: 17, Port: 53, DSCP: 46},
		},
		SteerMask: 0x00ff0000,
		SNAT: []dataplane.SNAT{
			{Origin: eip, Pod: a("10.244.0.5"), To: a("192.0.2.100")},
			{Origin: eip, Pod: a("10.244.1.7"), To: a("192.0.2.100")},
			{Origin: eip, Pod: a("fd00:10:244::5"), To: a("2001:db8:0:1::100")},
		},
		Exempt: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/12"),
			netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("192.0.2.2/32"),
			netip.MustParsePrefix("fd00:10:244::/56"), netip.MustParsePrefix("2001:db8:0:1::1/128")},
		Guarded: []netip.Addr{a("10.244.0.5"), a("10.244.0.6"), a("10.244.1.7"), a("fd00:10:244::5")},
		RemotePods: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("10.244.2.0/24"),
			netip.MustParsePrefix("fd00:10:244:0:1::/80")},
		SteerNexthops: []dataplane.SteerNexthop{{Mark: 0x10000, Nexthop: a("192.0.2.2")},
			{Mark: 0x10000, Nexthop: a("2001:db8:0:1::2")}},
		SteerDevices:   []string{"egressd-vx"},
		Secondary:      []netip.Addr{a("2001:db8:abcd::106")},
		SecondaryMarks: []dataplane.SecondaryMark{{EgressIP: a("2001:db8:abcd::106"), Mark: 0x30000}},
		Steered: []dataplane.SteeredPod{{Pod: a("10.244.0.6"), Mark: 0x10000}, {Pod: a("fd00:10:244::6"), Mark: 0x20000},
			{Pod: a("10.244.1.9"), Mark: 0x10000, Remote: true}},
		Frontends: []dataplane.Frontend{{Addr: a("198.51.100.80"), Port: dataplane.Port{Protocol: 6, Port: 80}},
			{Addr: a("2001:db8::80"), Port: dataplane.Port{Protocol: 17, Port: 53}}},
		FirewalledPods: []netip.Addr{a("10.244.0.7"), a("fd00:10:244::5")},
		DNSSnoop:       dataplane.DNSSnoop{Pods: []dataplane.SnoopedPod{{IP: a("10.244.0.7"), Namespace: "ns"}, {IP: a("fd00:10:244::5"), Namespace: "ns"}}, Queue: 7, Resolvers: []netip.Addr{a("10.96.0.10"), a("fd00:96::a")}},
	}
}

// TestPrivilegedTable: the table as nft lists it (golden file; -update rewrites it), IPv4 and
// IPv6; DNATed traffic from the pod to a denied backend is dropped and counted, exactly, for its
// rule; updates in place, which keep the kept elements' counters; an invalid firewall keeps its
// elements; an empty state keeps the table with empty sets, and the counters never go back; a
// table deleted or damaged behind egressd's back is repaired by the next Apply; Cleanup removes
// it.
func TestPrivilegedTable(t *testing.T) {
	privileged.Require(t)
	ns := netns.New(t, "nft")
	apply, counters, list := tableIn(t, ns)
	st := fullState()
	apply(st)
	golden.Assert(t, "testdata/table.golden", sortedElements(list()))

	// The pod sends 3 datagrams to a Service IP that ns DNATs to 203.0.113.10:53 and forwards:
	// the rule-1 element drops and counts them, exactly; nothing else counts. Every rule with
	// elements has an entry, so an empty map (or one of zeros) never passes.
	sent := sendDNATed(t, ns, "10.244.0.5", "10.96.0.10:53", "203.0.113.10:53", 3)
	if sent.Packets == 0 || sent.Bytes == 0 {
		t.Fatalf("nothing sent: %+v", sent)
	}
	rule1, rule2 := st.BackendDenies[1].Origin, st.BackendDenies[2].Origin
	wantCounts := map[dataplane.Origin]nft.Counters{rule1: sent, rule2: {}}
	poll.Eventually(t, "the drops counted", 5*time.Second, func() error {
		if got := counters(); !maps.Equal(got, wantCounts) {
			return fmt.Errorf("counters %s, want %s", byRule(got), byRule(wantCounts))
		}
		return nil
	})
	counted := fmt.Sprintf("203.0.113.10 . udp . 53 counter packets %d bytes %d", sent.Packets, sent.Bytes)
	if out := list(); !strings.Contains(out, counted) {
		t.Errorf("the kernel counter of the denied element is not %q:\n%s", counted, out)
	}

	// An element added and one removed: an update in place, which keeps the others (and their
	// counters).
	st.BackendDenies = append(st.BackendDenies[1:], deny("a", 1, "10.244.0.5", "203.0.113.11", 6, 443))
	st.Exempt = append([]netip.Prefix{netip.MustParsePrefix("10.240.0.0/12")}, st.Exempt[1:]...) // an interval grows
	st.Guarded = st.Guarded[1:]
	apply(st)
	out := list()
	for want, present := range map[string]bool{"203.0.113.11 . tcp . 443": true, "203.0.113.10 . tcp . 80": false,
		"203.0.113.10 . udp . 53": true, "10.240.0.0/12": true, "10.244.0.0/16": false, "10.244.0.6": true, "10.244.0.5 }": false} {
		if strings.Contains(out, want) != present {
			t.Errorf("after an update, %q present=%v, want %v:\n%s", want, !present, present, out)
		}
	}
	// The kept element kept its kernel counter (it was not written again), and the counts per
	// rule are what they were.
	if !strings.Contains(out, counted) {
		t.Errorf("after an update in place, the kept element lost its counter (want %q):\n%s", counted, out)
	}
	if got := counters(); !maps.Equal(got, wantCounts) {
		t.Errorf("after an update, counters %s, want %s", byRule(got), byRule(wantCounts))
	}

	// The firewall no longer compiles: its elements stay although nothing is compiled for it.
	apply(&dataplane.NftablesState{KeepBackendDenies: []string{"a"}})
	if out := list(); !strings.Contains(out, "2001:db8::10 . sctp . 9") {
		t.Errorf("an invalid firewall's elements went:\n%s", out)
	}
	// Empty: the table and its regular chains stay, with empty sets; no hook has a chain.
	apply(&dataplane.NftablesState{})
	if out := list(); strings.Contains(out, "elements") || !strings.Contains(out, "chain egressip_guard") || strings.Contains(out, " hook ") {
		t.Errorf("an empty state should leave the table with empty sets and no base chain:\n%s", out)
	}
	if got := counters(); !maps.Equal(got, wantCounts) {
		t.Errorf("with the elements gone, counters %s, want %s (they never go back)", byRule(got), byRule(wantCounts))
	}

	// Deleted behind egressd's back, with an unchanged state: the next Apply writes it again.
	apply(st)
	want := list()
	ns.MustRun(t, "nft", "delete", "table", "inet", "egressd")
	apply(st)
	if got := list(); sortedElements(got) != sortedElements(want) {
		t.Errorf("a deleted table was not repaired:\n%s\nwant:\n%s", got, want)
	}
	// A set deleted (with the rule that uses it): repaired as well.
	ns.MustRun(t, "nft", "flush", "chain", "inet", "egressd", "egressip_guard")
	ns.MustRun(t, "nft", "flush", "chain", "inet", "egressd", "egressip_guard_steered")
	ns.MustRun(t, "nft", "flush", "chain", "inet", "egressd", "egressip_snat")
	ns.MustRun(t, "nft", "delete", "set", "inet", "egressd", "egressip_guarded4")
	apply(st)
	if got := list(); sortedElements(got) != sortedElements(want) {
		t.Errorf("a deleted set was not repaired:\n%s\nwant:\n%s", got, want)
	}
	if got := counters(); !maps.Equal(got, wantCounts) {
		t.Errorf("after repairs, counters %s, want %s (they never go back)", byRule(got), byRule(wantCounts))
	}

	if err := ns.Do(nft.Cleanup); err != nil {
		t.Fatal(err)
	}
	if out := ns.MustRun(t, "nft", "list", "tables"); strings.Contains(out, "egressd") {
		t.Errorf("cleanup left the table:\n%s", out)
	}
	if err := ns.Do(nft.Cleanup); err != nil {
		t.Errorf("cleanup without a table: %v", err)
	}
}

// tableIn returns how to apply a state to egressd's table in ns (the table is created on first
// use, its netlink socket staying in ns), read its counters (in ns, where its connection talks)
// and list it.
func tableIn(t *testing.T, ns *netns.NS) (apply func(*dataplane.NftablesState), counters func() map[dataplane.Origin]nft.Counters, list func() string) {
	var table *nft.Table
	apply = func(s *dataplane.NftablesState) {
		t.Helper()
		if err := ns.Do(func() error {
			if table == nil {
				var err error
				if table, err = nft.New(); err != nil {
					return err
				}
			}
			if err := errFailed(table.Apply(s)); err != nil {
				return err
			}
			if !table.Intact() { // else the applier's look at it would write it again every 5 s
				return fmt.Errorf("the table is not whole right after Apply")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	counters = func() (c map[dataplane.Origin]nft.Counters) {
		t.Helper()
		if err := ns.Do(func() error { c = table.Counters(); return nil }); err != nil {
			t.Fatal(err)
		}
		return c
	}
	list = func() string { t.Helper(); return nftList(t, ns, "table", "inet", "egressd") }
	return apply, counters, list
}

// compatQueue says the kernel has no nft queue expression (CONFIG_NFT_QUEUE; the 6.18 kernel of
// the development machines has none): the tables then queue DNS answers with the xtables
// NFQUEUE target (nft.New finds out), which the kernel runs the same; nftList shows it as nft
// lists the queue expression, so that one golden file holds for both kernels.
var compatQueue bool

func TestMain(m *testing.M) {
	compatQueue = os.Geteuid() == 0 && !nativeQueue()
	os.Exit(m.Run())
}

// nativeQueue tells whether the kernel takes nft's queue expression, tried in a namespace of its
// own.
func nativeQueue() bool {
	ns, err := netns.Create(fmt.Sprintf("egt%d-queueprobe", os.Getpid()))
	if err != nil {
		return true // the privileged tests say why
	}
	defer ns.Delete()
	return ns.Script("nft add table inet probe", "nft add chain inet probe c", "nft add rule inet probe c queue num 0 bypass") == nil
}

// compatWarning is what nft adds to the listing of a table holding an xtables expression, and
// compatQueueRE the NFQUEUE target as iptables translates it.
var (
	compatWarning = regexp.MustCompile(`(?m)^# Warning: table .* is managed by iptables-nft, do not touch!\n`)
	compatQueueRE = regexp.MustCompile(`queue num (\d+) bypass`)
)

// nftList is what nft list prints in ns (standard output: libxtables complains on stderr); with
// compatQueue, the NFQUEUE target as nft lists the queue expression.
func nftList(t testing.TB, ns *netns.NS, what ...string) string {
	t.Helper()
	out, err := ns.Command("nft", append([]string{"list"}, what...)...).Output()
	if err != nil {
		t.Fatalf("nft list %s in %s: %v", strings.Join(what, " "), ns.Name, err)
	}
	if !compatQueue {
		return string(out)
	}
	return compatQueueRE.ReplaceAllString(compatWarning.ReplaceAllString(string(out), ""), "queue flags bypass to $1")
}

func errFailed(failed map[dataplane.Origin]error) error {
	var errs []error
	for o, err := range failed {
		errs = append(errs, fmt.Errorf("%s: %w", o, err))
	}
	return errors.Join(errs...)
}

// byRule formats counters per EgressFirewall rule, in order (an Origin prints without its rule).
func byRule(c map[dataplane.Origin]nft.Counters) string {
	var out []string
	for o, n := range c {
		out = append(out, fmt.Sprintf("%s rule %d: %d packets %d bytes", o, o.Rule, n.Packets, n.Bytes))
	}
	slices.Sort(out)
	return "[" + strings.Join(out, "; ") + "]"
}

var elementsRE = regexp.MustCompile(`(?s)elements = \{ (.*?) \}`)

// sortedElements puts each set's elements on one line in order (nft lists a hash set in the
// order of its buckets).
func sortedElements(listing string) string {
	return elementsRE.ReplaceAllStringFunc(listing, func(m string) string {
		var es []string
		for _, e := range strings.Split(elementsRE.FindStringSubmatch(m)[1], ",") {
			es = append(es, strings.TrimSpace(e))
		}
		slices.Sort(es)
		return "elements = { " + strings.Join(es, ", ") + " }"
	})
}

// sendDNATed makes ns a router that DNATs svc to backend (as kube-proxy would) and forwards to
// it, then sends n UDP datagrams from a pod with address pod behind ns to svc. Returns what the
// datagrams amount to at the forward hook.
func sendDNATed(t *testing.T, ns *netns.NS, pod, svc, backend string, n int) nft.Counters {
	t.Helper()
	svcAP, backendAP := netip.MustParseAddrPort(svc), netip.MustParseAddrPort(backend)
	return sendForwarded(t, ns, pod, svc, backendAP.Addr(), n,
		"nft add table ip labproxy",
		"nft add chain ip labproxy pre { type nat hook prerouting priority dstnat ; }",
		fmt.Sprintf("nft add rule ip labproxy pre ip daddr %s udp dport %d dnat to %s", svcAP.Addr(), svcAP.Port(), backend))
}

// sendForwarded makes ns a router that forwards to out (after the script), then sends n UDP
// datagrams from a pod with address pod behind ns to dst. Returns what the datagrams amount to
// at the forward hook.
func sendForwarded(t *testing.T, ns *netns.NS, pod, dst string, out netip.Addr, n int, script ...string) nft.Counters {
	t.Helper()
	p := netns.New(t, "pod")
	netns.Veth(t, ns, "pod0", p, "eth0")
	p.Addr(t, "eth0", pod+"/24")
	gw := netip.MustParsePrefix(pod + "/24").Masked().Addr().Next()
	ns.Addr(t, "pod0", gw.String()+"/24")
	if err := p.Script("ip route add default via " + gw.String()); err != nil {
		t.Fatal(err)
	}
	netns.Veth(t, ns, "ext0", netns.New(t, "ext"), "eth0") // where out is: a route is enough
	if err := ns.Script(append([]string{"sysctl -qw net.ipv4.ip_forward=1", "ip route add " + out.String() + "/32 dev ext0"}, script...)...); err != nil {
		t.Fatal(err)
	}
	payload := []byte("0123456789")
	if err := p.Do(func() error {
		// Unconnected, with one source port: an ICMP error in answer does not fail the next write.
		c, err := net.ListenPacket("udp4", pod+":0")
		if err != nil {
			return err
		}
		defer c.Close()
		to := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(dst))
		for range n {
			if _, err := c.WriteTo(payload, to); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return nft.Counters{Packets: uint64(n), Bytes: uint64(n * (20 + 8 + len(payload)))}
}

// TestPrivilegedTableFrontendsWithoutDNAT: a firewalled pod's flow to a Service's frontend that
// is forwarded without DNAT is dropped and counted; the same flow DNATed is not (the backend
// judges it), nor is a pod without firewall's.
func TestPrivilegedTableFrontendsWithoutDNAT(t *testing.T) {
	privileged.Require(t)
	for _, c := range []struct {
		name string
		pod  string
		dnat bool
		drop bool
	}{{"without DNAT", "10.244.0.5", false, true}, {"DNATed", "10.244.0.5", true, false}, {"a pod without firewall", "10.244.0.6", false, false}} {
		t.Run(c.name, func(t *testing.T) {
			ns := netns.New(t, "nft")
			apply, _, _ := tableIn(t, ns)
			a := netip.MustParseAddr
			apply(&dataplane.NftablesState{FirewalledPods: []netip.Addr{a("10.244.0.5")},
				Frontends: []dataplane.Frontend{{Addr: a("203.0.113.10"), Port: dataplane.Port{Protocol: 17, Port: 53}}}})
			var sent nft.Counters
			if c.dnat {
				sent = sendDNATed(t, ns, c.pod, "203.0.113.10:53", "203.0.113.11:53", 3)
			} else {
				sent = sendForwarded(t, ns, c.pod, "203.0.113.10:53", a("203.0.113.10"), 3)
			}
			want := "packets 0 bytes 0"
			time.Sleep(100 * time.Millisecond) // the datagrams through the forward hook
			if c.drop {
				want = fmt.Sprintf("packets %d bytes %d", sent.Packets, sent.Bytes)
			}
			poll.Eventually(t, "the drops counted", 5*time.Second, func() error {
				if out := ns.MustRun(t, "nft", "list", "counter", "inet", "egressd", "fw_frontend_drops"); !strings.Contains(out, want) {
					return fmt.Errorf("want %q:\n%s", want, out)
				}
				return nil
			})
		})
	}
}

// TestPrivilegedTableBackendDSCP: backend DSCP elements are updated in place while the DSCP
// values in use stay the same (no rewrite: the deny counters keep counting), and a new value
// gets its chain.
func TestPrivilegedTableBackendDSCP(t *testing.T) {
	privileged.Require(t)
	ns := netns.New(t, "nft")
	apply, _, list := tableIn(t, ns)
	st := fullState()
	apply(st)
	sent := sendDNATed(t, ns, "10.244.0.5", "10.96.0.10:53", "203.0.113.10:53", 2)
	counted := fmt.Sprintf("203.0.113.10 . udp . 53 counter packets %d", sent.Packets)
	poll.Eventually(t, "the drops counted", 5*time.Second, func() error {
		if out := list(); !strings.Contains(out, counted) {
			return fmt.Errorf("no %q:\n%s", counted, out)
		}
		return nil
	})
	qos := dataplane.Origin{Kind: "EgressQoS", Namespace: "a", Name: "default"}
	st.BackendDSCP = append(st.BackendDSCP, dataplane.BackendDSCP{Origin: qos, Pod: netip.MustParseAddr("10.244.0.7"),
		Backend: netip.MustParseAddr("198.51.100.20"), Protocol: 17, Port: 53, DSCP: 10})
	st.BackendDSCP[0].DSCP = 10 // 10.244.0.5: 46 -> 10; 46 is still used by the IPv6 element
	apply(st)
	out := list()
	for _, want := range []string{counted, "10.244.0.7 . 198.51.100.20 . udp . 53 : jump qos_dscp_10", "10.244.0.5 . 198.51.100.20 . tcp . 443 : jump qos_dscp_10"} {
		if !strings.Contains(out, want) {
			t.Errorf("after an update in place, no %q:\n%s", want, out)
		}
	}
	st.BackendDSCP[2].DSCP = 0 // a new value: its chain appears, 46's goes
	apply(st)
	out = list()
	if !strings.Contains(out, "chain qos_dscp_0 {") || strings.Contains(out, "qos_dscp_46") || !strings.Contains(out, ": jump qos_dscp_0") {
		t.Errorf("after a change of the values in use:\n%s", out)
	}
}

// TestPrivilegedTableJumpsOnlyToFeaturesInUse: a node that uses none of the table's features
// has no chain on a hook (each costs every forwarded packet); one Service backend denied adds
// the base chains that jump to that feature's chain only, and it drops; the state emptied again
// removes them.
func TestPrivilegedTableJumpsOnlyToFeaturesInUse(t *testing.T) {
	privileged.Require(t)
	ns := netns.New(t, "nftidle")
	apply, counters, list := tableIn(t, ns)
	// jumps are the hooks' chains and their jumps, in the order listed.
	jumps := func(st *dataplane.NftablesState) []string {
		apply(st)
		var out []string
		for _, line := range strings.Split(list(), "\n") {
			line = strings.TrimSpace(line)
			if j, ok := strings.CutPrefix(line, "jump "); ok {
				out = append(out, j)
			}
			if strings.HasPrefix(line, "type ") && strings.Contains(line, " hook ") {
				out = append(out, "hook "+strings.Fields(line)[3])
			}
		}
		return out
	}
	idle := &dataplane.NftablesState{SteerMask: 0x00ff0000, Exempt: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	if j := jumps(idle); len(j) != 0 {
		t.Errorf("an idle node's hooks have %v, want no chain", j)
	}
	denied := *idle
	denied.BackendDenies = []dataplane.BackendDeny{deny("a", 1, "10.244.0.5", "203.0.113.10", 17, 53)}
	if j := jumps(&denied); !slices.Equal(j, []string{"hook forward", "fw_service_backends", "hook input", "fw_service_backends"}) {
		t.Errorf("with a Service backend denied, the hooks' chains are %v, want a chain at forward and one at input, each jumping to fw_service_backends", j)
	}
	if sent := sendDNATed(t, ns, "10.244.0.5", "10.96.0.10:53", "203.0.113.10:53", 3); sent.Packets == 0 {
		t.Fatal("nothing sent")
	}
	poll.Eventually(t, "the denied backend's datagrams dropped and counted", 5*time.Second, func() error {
		if c := counters(); c[denied.BackendDenies[0].Origin].Packets == 0 {
			return fmt.Errorf("counters %s", byRule(c))
		}
		return nil
	})
	if j := jumps(idle); len(j) != 0 {
		t.Errorf("idle again, the hooks have %v, want no chain", j)
	}
}

// TestPrivilegedSteerChains: the steer_mark_<mark> chains follow the steered pods' marks (a
// new mark adds its chain, a mark no longer used takes its chain away), the table counts as
// whole after each change (tableIn's apply checks), and without a steering mask nothing is
// steered after DNAT.
func TestPrivilegedSteerChains(t *testing.T) {
	privileged.Require(t)
	ns := netns.New(t, "nft")
	apply, _, list := tableIn(t, ns)
	chains := func() []string {
		t.Helper()
		var out []string
		for _, l := range strings.Split(list(), "\n") {
			if name, ok := strings.CutPrefix(strings.TrimSpace(l), "chain steer_"); ok {
				out = append(out, strings.TrimSuffix(name, " {"))
			}
		}
		slices.Sort(out)
		return out
	}
	a := netip.MustParseAddr
	st := fullState()
	for _, step := range []struct {
		name    string
		steered []dataplane.SteeredPod
		mask    uint32
		want    []string
	}{
		{"two marks", st.Steered, st.SteerMask, []string{"mark_00010000", "mark_00020000", "replies", "unmarked"}},
		{"another mark", []dataplane.SteeredPod{{Pod: a("10.244.0.6"), Mark: 0x30000}}, st.SteerMask, []string{"mark_00030000", "replies", "unmarked"}},
		{"a remote pod's mark", []dataplane.SteeredPod{{Pod: a("10.244.1.9"), Mark: 0x40000, Remote: true}}, st.SteerMask, []string{"mark_00040000", "replies", "unmarked"}},
		{"none", nil, st.SteerMask, []string{"replies", "unmarked"}},
		{"no steering mask", st.Steered, 0, []string{"replies", "unmarked"}}, // the regular chains stay, empty
	} {
		s := fullState()
		s.Steered, s.SteerMask = step.steered, step.mask
		s.SecondaryMarks = nil // its mark has a chain too (reversepath.go)
		apply(s)
		if got := chains(); !slices.Equal(got, step.want) {
			t.Errorf("%s: steer chains %v, want %v", step.name, got, step.want)
		}
	}
	if out, err := ns.Run("nft", "list", "chain", "inet", "egressd", "prerouting_dstnat"); err == nil {
		t.Errorf("without a steering mask, the prerouting_dstnat hook is still there:\n%s", out)
	}
}
