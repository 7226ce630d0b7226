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

// TestPrivilegedTable: the table as nft lists it (golden file; -update rewrites it), IPv4 and
// IPv6; DNATed traffic from the pod to a denied backend is dropped and counted for its rule; an
// update in place keeps the elements' counters; an invalid firewall keeps its elements; an
// empty state leaves no table, and the counters do not go back; Cleanup.
func TestPrivilegedTable(t *testing.T) {
	privileged.Require(t)
	ns := netns.New(t, fmt.Sprintf("egressd-nft-test-%d", os.Getpid()))
	var table *nft.Table
	apply := func(s *dataplane.State) {
		t.Helper()
		if err := ns.Do(func() error {
			if table == nil {
				var err error
				table, err = nft.New() // it talks to the namespace of the thread that calls it
				return errors.Join(err, errFailed(table.Apply(s)))
			}
			return errFailed(table.Apply(s))
		}); err != nil {
			t.Fatal(err)
		}
	}
	// counters reads the table's counters in ns: the table's netlink connection talks to the
	// namespace of the calling thread.
	counters := func() (c map[dataplane.Origin]nft.Counters) {
		t.Helper()
		if err := ns.Do(func() error { c = table.Counters(); return nil }); err != nil {
			t.Fatal(err)
		}
		return c
	}
	fwA := dataplane.Firewall{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: "a", Name: "default"}}
	st := &dataplane.State{Firewalls: []dataplane.Firewall{fwA}, BackendDenies: []dataplane.BackendDeny{
		deny("a", 1, "10.244.0.5", "203.0.113.10", 6, 80),
		deny("a", 1, "10.244.0.5", "203.0.113.10", 17, 53),
		deny("a", 2, "fd00:10:244::5", "2001:db8::10", 132, 9),
	}}
	apply(st)
	golden.Assert(t, "testdata/table.golden", sortedElements(ns.MustRun(t, "nft", "list", "table", "inet", "egressd")))

	// The pod sends 3 datagrams to a Service IP that ns DNATs to 203.0.113.10:53 and forwards:
	// the rule-1 element drops and counts them; nothing else counts.
	sent := sendDNATed(t, ns, "10.244.0.5", "10.96.0.10:53", "203.0.113.10:53", 3)
	rule1, rule2 := st.BackendDenies[1].Origin, st.BackendDenies[2].Origin
	want := map[dataplane.Origin]nft.Counters{rule1: sent, rule2: {}}
	poll.Eventually(t, "the drops counted", 5*time.Second, func() error {
		if got := counters(); !maps.Equal(got, want) {
			return fmt.Errorf("counters %+v, want %+v", got, want)
		}
		return nil
	})

	// An element added and one removed: an update in place, which keeps the others (and their
	// counters).
	st.BackendDenies = append(st.BackendDenies[1:], deny("a", 1, "10.244.0.5", "203.0.113.11", 6, 443))
	apply(st)
	out := ns.MustRun(t, "nft", "list", "table", "inet", "egressd")
	for want, present := range map[string]bool{"203.0.113.11 . tcp . 443": true, "203.0.113.10 . tcp . 80": false, "203.0.113.10 . udp . 53": true} {
		if strings.Contains(out, want) != present {
			t.Errorf("after an update, %q present=%v, want %v:\n%s", want, !present, present, out)
		}
	}
	counted := fmt.Sprintf("203.0.113.10 . udp . 53 counter packets %d bytes %d", sent.Packets, sent.Bytes)
	if !strings.Contains(out, counted) {
		t.Errorf("after an update in place, the kept element lost its counter (want %q):\n%s", counted, out)
	}
	if got := counters(); !maps.Equal(got, want) {
		t.Errorf("after an update, counters %+v, want %+v", got, want)
	}

	// The firewall no longer compiles: its elements stay although nothing is compiled for it.
	fwA.Err = errors.New("invalid")
	apply(&dataplane.State{Firewalls: []dataplane.Firewall{fwA}})
	if out := ns.MustRun(t, "nft", "list", "table", "inet", "egressd"); !strings.Contains(out, "2001:db8::10 . sctp . 9") {
		t.Errorf("an invalid firewall's elements went:\n%s", out)
	}
	apply(&dataplane.State{})
	if out := ns.MustRun(t, "nft", "list", "tables"); strings.Contains(out, "egressd") {
		t.Errorf("an empty state left the table:\n%s", out)
	}
	if got := counters(); !maps.Equal(got, want) {
		t.Errorf("with the table gone, counters %+v, want %+v (they never go back)", got, want)
	}
	apply(st)
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

func errFailed(failed map[dataplane.Origin]error) error {
	var errs []error
	for o, err := range failed {
		errs = append(errs, fmt.Errorf("%s: %w", o, err))
	}
	return errors.Join(errs...)
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
	p := netns.New(t, "pod")
	netns.Veth(t, ns, "pod0", p, "eth0")
	p.Addr(t, "eth0", pod+"/24")
	gw := netip.MustParsePrefix(pod + "/24").Masked().Addr().Next()
	ns.Addr(t, "pod0", gw.String()+"/24")
	if err := p.Script("ip route add default via " + gw.String()); err != nil {
		t.Fatal(err)
	}
	netns.Veth(t, ns, "ext0", netns.New(t, "ext"), "eth0") // where the backend is: a route is enough
	if err := ns.Script(
		"sysctl -qw net.ipv4.ip_forward=1",
		"ip route add "+backendAP.Addr().String()+"/32 dev ext0",
		"nft add table ip labproxy",
		"nft add chain ip labproxy pre { type nat hook prerouting priority dstnat ; }",
		fmt.Sprintf("nft add rule ip labproxy pre ip daddr %s udp dport %d dnat to %s", svcAP.Addr(), svcAP.Port(), backend),
	); err != nil {
		t.Fatal(err)
	}
	payload := []byte("0123456789")
	if err := p.Do(func() error {
		c, err := net.Dial("udp", svc)
		if err != nil {
			return err
		}
		defer c.Close()
		for range n {
			if _, err := c.Write(payload); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return nft.Counters{Packets: uint64(n), Bytes: uint64(n * (20 + 8 + len(payload)))}
}
