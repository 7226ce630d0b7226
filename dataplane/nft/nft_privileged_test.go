package nft_test

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/nft"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

var update = flag.Bool("update", false, "rewrite the golden files")

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
		SteerNexthops: []dataplane.SteerNexthop{{Mark: 0x10000, Nexthop: a("192.0.2.2")},
			{Mark: 0x10000, Nexthop: a("2001:db8:0:1::2")}},
		SteerDevices: []string{"egressd-vx"},
	}
}

// TestPrivilegedTable: the table as nft lists it (golden file; -update rewrites it), IPv4 and
// IPv6; updates in place; an invalid firewall keeps its elements; an empty state keeps the
// table with empty sets; a table deleted or damaged behind egressd's back is repaired by the
// next Apply; Cleanup removes it.
func TestPrivilegedTable(t *testing.T) {
	privileged.Require(t)
	ns := netns.New(t, "nft")
	var table *nft.Table
	apply := func(s *dataplane.NftablesState) {
		t.Helper()
		if err := ns.Do(func() error {
			if table == nil {
				var err error
				if table, err = nft.New(); err != nil { // its netlink socket stays in ns
					return err
				}
			}
			return errFailed(table.Apply(s))
		}); err != nil {
			t.Fatal(err)
		}
	}
	list := func() string { t.Helper(); return ns.MustRun(t, "nft", "list", "table", "inet", "egressd") }
	st := fullState()
	apply(st)
	golden(t, sortedElements(list()), "testdata/table.golden")

	// An element added and one removed: an update in place, which keeps the others (and their
	// counters).
	st.BackendDenies = append(st.BackendDenies[1:], deny("a", 1, "10.244.0.5", "203.0.113.11", 6, 443))
	st.Exempt[0] = netip.MustParsePrefix("10.240.0.0/12") // an interval grows
	st.Guarded = st.Guarded[1:]
	apply(st)
	out := list()
	for want, present := range map[string]bool{"203.0.113.11 . tcp . 443": true, "203.0.113.10 . tcp . 80": false,
		"203.0.113.10 . udp . 53": true, "10.240.0.0/12": true, "10.244.0.0/16": false, "10.244.0.6": true, "10.244.0.5 }": false} {
		if strings.Contains(out, want) != present {
			t.Errorf("after an update, %q present=%v, want %v:\n%s", want, !present, present, out)
		}
	}
	if c := table.Counters(); c[st.BackendDenies[0].Origin].Packets != 0 {
		t.Errorf("counters without traffic: %+v", c)
	}

	// The firewall no longer compiles: its elements stay although nothing is compiled for it.
	apply(&dataplane.NftablesState{KeepBackendDenies: []string{"a"}})
	if out := list(); !strings.Contains(out, "2001:db8::10 . sctp . 9") {
		t.Errorf("an invalid firewall's elements went:\n%s", out)
	}
	// Empty: the table and its chains stay, with empty sets.
	apply(&dataplane.NftablesState{})
	if out := list(); strings.Contains(out, "elements") || !strings.Contains(out, "chain postrouting_guard") {
		t.Errorf("an empty state should leave the table with empty sets:\n%s", out)
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
	ns.MustRun(t, "nft", "delete", "set", "inet", "egressd", "egressip_guarded4")
	apply(st)
	if got := list(); sortedElements(got) != sortedElements(want) {
		t.Errorf("a deleted set was not repaired:\n%s\nwant:\n%s", got, want)
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

func golden(t *testing.T, got, path string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}
