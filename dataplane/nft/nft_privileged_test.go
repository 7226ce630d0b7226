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

// TestPrivilegedTable: the table as nft lists it (golden file; -update rewrites it), IPv4 and
// IPv6; an invalid firewall keeps its elements; an empty state leaves no table; Cleanup.
func TestPrivilegedTable(t *testing.T) {
	privileged.Require(t)
	ns := netns.New(t, fmt.Sprintf("egressd-nft-test-%d", os.Getpid()))
	var table *nft.Table
	apply := func(s *dataplane.NftablesState) {
		t.Helper()
		if err := ns.Do(func() error {
			if table == nil {
				var err error
				table, err = nft.New() // its netlink socket stays in ns
				return errors.Join(err, errFailed(table.Apply(s)))
			}
			return errFailed(table.Apply(s))
		}); err != nil {
			t.Fatal(err)
		}
	}
	fwA := dataplane.Firewall{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: "a", Name: "default"}}
	st := &dataplane.NftablesState{BackendDenies: []dataplane.BackendDeny{
		deny("a", 1, "10.244.0.5", "203.0.113.10", 6, 80),
		deny("a", 1, "10.244.0.5", "203.0.113.10", 17, 53),
		deny("a", 2, "fd00:10:244::5", "2001:db8::10", 132, 9),
	}}
	apply(st)
	golden(t, sortedElements(ns.MustRun(t, "nft", "list", "table", "inet", "egressd")), "testdata/table.golden")

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
	if c := table.Counters(); len(c) != 0 && (c[st.BackendDenies[0].Origin].Packets != 0) {
		t.Errorf("counters without traffic: %+v", c)
	}

	// The firewall no longer compiles: its elements stay although nothing is compiled for it.
	apply(&dataplane.NftablesState{KeepBackendDenies: []string{fwA.Origin.Namespace}})
	if out := ns.MustRun(t, "nft", "list", "table", "inet", "egressd"); !strings.Contains(out, "2001:db8::10 . sctp . 9") {
		t.Errorf("an invalid firewall's elements went:\n%s", out)
	}
	apply(&dataplane.NftablesState{})
	if out := ns.MustRun(t, "nft", "list", "tables"); strings.Contains(out, "egressd") {
		t.Errorf("an empty state left the table:\n%s", out)
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
