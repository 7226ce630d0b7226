package main

import (
	"fmt"
	"io"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/watchers/dnsnames"
)

// dnsReport is what the agent keeps of EgressFirewall dnsName rules' names, as last written
// next to its CNI socket (at most a second behind): the addresses it resolved, and those
// learned from the DNS answers pods got, with the time each has left.
type dnsReport struct {
	Names []dnsName `json:"names"`
}

type dnsName struct {
	Name     string       `json:"name"`
	Resolved []netip.Addr `json:"resolved,omitempty"`
	Learned  []learned    `json:"learned,omitempty"`
}

type learned struct {
	Address netip.Addr `json:"address"`
	// Expires is when the address stops being allowed (the answer's TTL, plus 5 s).
	Expires time.Time `json:"expires"`
}

func readDNS(o options, now time.Time) (dnsReport, error) {
	resolved, learnedBy, err := dnsnames.Kept(filepath.Dir(o.cniSocket))
	if err != nil {
		return dnsReport{}, err
	}
	var r dnsReport
	names := slices.Sorted(maps.Keys(resolved))
	for name := range learnedBy {
		if _, ok := resolved[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		n := dnsName{Name: name, Resolved: resolved[name]}
		for a, exp := range learnedBy[name] {
			if exp.After(now) {
				n.Learned = append(n.Learned, learned{Address: a, Expires: exp.UTC().Truncate(time.Second)})
			}
		}
		slices.SortFunc(n.Learned, func(a, b learned) int { return a.Address.Compare(b.Address) })
		r.Names = append(r.Names, n)
	}
	return r, nil
}

func (r dnsReport) writeText(w io.Writer) error {
	if len(r.Names) == 0 {
		_, err := fmt.Fprintln(w, "no dnsName addresses kept (no rule with dnsName, or the agent has not written them yet)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tRESOLVED\tLEARNED (TIME LEFT)")
	now := time.Now()
	for _, n := range r.Names {
		var ls []string
		for _, l := range n.Learned {
			ls = append(ls, fmt.Sprintf("%s (%s)", l.Address, l.Expires.Sub(now).Round(time.Second)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", n.Name, orNone(joinStrings(n.Resolved)), orNone(strings.Join(ls, ", ")))
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
