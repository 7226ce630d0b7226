package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/egressd/egressd/dataplane/classifier"
)

// rules prints the programmed EgressFirewall (qos false) or EgressQoS rules with their counters.
func rules(pinRoot string, qos bool, out io.Writer) error {
	in, err := classifier.Inspect(pinRoot)
	if err != nil {
		return err
	}
	defer in.Close()
	rs, err := in.Rules(qos)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	counted := "PACKETS\tBYTES"
	if qos {
		counted = "MARKED PACKETS\t"
	}
	fmt.Fprintf(w, "NAMESPACE\tRULE\t%s\tSPEC\n", counted)
	for _, r := range rs {
		bytes := strconv.FormatUint(r.Counters.Bytes, 10)
		if qos {
			bytes = ""
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\n", r.Namespace, r.Index, r.Counters.Packets, bytes, r.Text)
	}
	return w.Flush()
}
