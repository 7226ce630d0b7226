package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/internal/dnsname"
	"github.com/egressd/egressd/watchers/dnsnames"
)

// dnsReport is, per name of an EgressFirewall dnsName rule, the rules that name it (read from
// the programmed rules), the addresses the agent resolved and those learned from the DNS answers
// pods got, with their expiry, as the agent last wrote them next to its CNI socket (at most a
// second behind). A wildcard's row holds what was learned for each name it matched.
type dnsReport struct {
	Names []dnsName `json:"names"`
}

type dnsName struct {
	Name     string       `json:"name"`
	Rules    []string     `json:"rules,omitempty"` // namespace#index
	Resolved []netip.Addr `json:"resolved,omitempty"`
	Learned  []learned    `json:"learned,omitempty"`
}

type learned struct {
	Name    string     `json:"name"` // the name answered (under a wildcard: the one it matched)
	Address netip.Addr `json:"address"`
	// Expires is when the address stops being allowed (the answer's TTL, plus 5 s).
	Expires time.Time `json:"expires"`
}

func readDNS(o options, now time.Time) (dnsReport, error) {
	resolved, learnedBy, err := dnsnames.Kept(filepath.Dir(o.cniSocket))
	if err != nil {
		return dnsReport{}, err
	}
	rows := map[string]*dnsName{}
	row := func(name string) *dnsName {
		if rows[name] == nil {
			rows[name] = &dnsName{Name: name}
		}
		return rows[name]
	}
	// The rules, when the classifier's maps can be read (else the names alone).
	if rs, err := readRules(o.pinRoot, false); err == nil {
		for _, r := range rs.Rules {
			if _, after, ok := strings.Cut(r.Spec, "to dnsName "); ok {
				name := dnsname.Canonical(strings.Fields(after)[0])
				row(name).Rules = append(row(name).Rules, fmt.Sprintf("%s#%d", r.Namespace, r.Rule))
			}
		}
	}
	for name, addrs := range resolved {
		row(name).Resolved = addrs
	}
	for name, m := range learnedBy {
		under := name
		if i := strings.IndexByte(name, '.'); i > 0 && rows[name] == nil && rows["*"+name[i:]] != nil {
			under = "*" + name[i:] // learned through the wildcard's rule
		}
		for a, exp := range m {
			if exp.After(now) {
				row(under).Learned = append(row(under).Learned, learned{Name: name, Address: a, Expires: exp.UTC().Truncate(time.Second)})
			}
		}
	}
	var r dnsReport
	for _, name := range slices.Sorted(maps.Keys(rows)) {
		n := rows[name]
		slices.SortFunc(n.Learned, func(a, b learned) int {
			return cmp.Or(strings.Compare(a.Name, b.Name), a.Address.Compare(b.Address))
		})
		r.Names = append(r.Names, *n)
	}
	return r, nil
}

func (r dnsReport) writeText(w io.Writer) error {
	if len(r.Names) == 0 {
		_, err := fmt.Fprintln(w, "no dnsName rule programmed, and no addresses kept")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tRULES\tRESOLVED\tLEARNED (TIME LEFT)")
	now := time.Now()
	for _, n := range r.Names {
		var ls []string
		for _, l := range n.Learned {
			s := fmt.Sprintf("%s (%s)", l.Address, l.Expires.Sub(now).Round(time.Second))
			if l.Name != n.Name {
				s = l.Name + " " + s
			}
			ls = append(ls, s)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Name, orNone(strings.Join(n.Rules, ", ")), orNone(joinStrings(n.Resolved)), orNone(strings.Join(ls, ", ")))
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
