package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/egressd/egressd/dataplane/classifier"
)

// rulesReport are the programmed EgressFirewall or EgressQoS rules with their counters.
type rulesReport struct {
	// Kind is EgressFirewall or EgressQoS.
	Kind  string     `json:"kind"`
	Rules []rulesRow `json:"rules"`
}

// rulesRow is one programmed rule; an EgressQoS rule counts the packets it marked, no bytes
// (nil).
type rulesRow struct {
	Namespace string  `json:"namespace"`
	Rule      int     `json:"rule"`
	Packets   uint64  `json:"packets"`
	Bytes     *uint64 `json:"bytes,omitempty"`
	Spec      string  `json:"spec"`
}

// readRules reads the programmed EgressFirewall (qos false) or EgressQoS rules with their
// counters.
func readRules(pinRoot string, qos bool) (rulesReport, error) {
	r := rulesReport{Kind: "EgressFirewall", Rules: []rulesRow{}}
	if qos {
		r.Kind = "EgressQoS"
	}
	in, err := classifier.Inspect(pinRoot)
	if err != nil {
		return r, err
	}
	defer in.Close()
	rs, err := in.Rules(qos)
	if err != nil {
		return r, err
	}
	for _, rule := range rs {
		row := rulesRow{Namespace: rule.Namespace, Rule: rule.Index, Packets: rule.Counters.Packets, Spec: rule.Text}
		if !qos {
			row.Bytes = &rule.Counters.Bytes
		}
		r.Rules = append(r.Rules, row)
	}
	return r, nil
}

func (r rulesReport) writeText(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	counted := "PACKETS\tBYTES"
	if r.Kind == "EgressQoS" {
		counted = "MARKED PACKETS\t"
	}
	fmt.Fprintf(w, "NAMESPACE\tRULE\t%s\tSPEC\n", counted)
	for _, row := range r.Rules {
		bytes := ""
		if row.Bytes != nil {
			bytes = strconv.FormatUint(*row.Bytes, 10)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\n", row.Namespace, row.Rule, row.Packets, bytes, row.Spec)
	}
	return w.Flush()
}
