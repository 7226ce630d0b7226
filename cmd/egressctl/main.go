// Command egressctl inspects and cleans up what egressd programmed on a node.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/addresses"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/nft"
	"github.com/egressd/egressd/dataplane/routing"
	"github.com/egressd/egressd/dataplane/tcx"
	"github.com/egressd/egressd/internal/version"
)

const help = `egressctl inspects what egressd programmed on this node.

Usage:
  egressctl firewall [--bpf-pin-root DIR]    EgressFirewall rules programmed per namespace,
                                             with the packets and bytes each one decided
  egressctl qos [--bpf-pin-root DIR]         EgressQoS rules programmed per namespace, with
                                             the packets each one marked
  egressctl trace [--bpf-pin-root DIR] SRC DST [tcp|udp|sctp/PORT]
                                             what the classifier does with a new flow from
                                             pod address SRC: verdict, rule, DSCP
  egressctl egressip                         egress IPs this node hosts, the pods it SNATs to
                                             them, and egressd's routing (steering to egress
                                             nodes, external gateways)
  egressctl cleanup [--bpf-pin-root DIR]     remove every kernel object egressd owns on this
                                             node (stop the agent first, or it re-creates them)
  egressctl version                          print the version
  egressctl help                             print this help

Not yet: egressctl bfd (BFD sessions to external gateways; see the egressd_bfd_* metrics).
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, help)
		return 2
	}
	switch args[0] {
	case "version":
		fmt.Fprintln(stdout, "egressctl", version.String())
	case "help", "-h", "--help":
		fmt.Fprint(stdout, help)
	case "egressip":
		if err := egressIP(stdout); err != nil {
			fmt.Fprintf(stderr, "egressctl egressip: %v\n", err)
			return 1
		}
	case "cleanup", "firewall", "qos", "trace":
		fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
		fs.SetOutput(stderr)
		pinRoot := fs.String("bpf-pin-root", "/sys/fs/bpf/egressd", "the agent's --bpf-pin-root")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		var err error
		switch args[0] {
		case "cleanup":
			err = cleanup(*pinRoot, stdout)
		case "firewall", "qos":
			err = rules(*pinRoot, args[0] == "qos", stdout)
		case "trace":
			err = trace(*pinRoot, fs.Args(), stdout)
		}
		if err != nil {
			fmt.Fprintf(stderr, "egressctl %s: %v\n", args[0], err)
			return 1
		}
	default:
		fmt.Fprintf(stderr, "egressctl: unknown command %q\n\n%s", args[0], help)
		return 2
	}
	return 0
}

// cleanup removes, per kernel facility, what egressd owns, then the pin root itself.
func cleanup(pinRoot string, out io.Writer) error {
	if err := tcx.Cleanup(pinRoot); err != nil {
		return fmt.Errorf("detach classifier links under %s: %w", pinRoot, err)
	}
	fmt.Fprintf(out, "detached classifier links pinned under %s\n", tcx.LinksDir(pinRoot))
	if err := classifier.Cleanup(pinRoot); err != nil {
		return fmt.Errorf("remove classifier maps under %s: %w", pinRoot, err)
	}
	fmt.Fprintf(out, "removed classifier maps under %s\n", pinRoot)
	if err := nft.Cleanup(); err != nil {
		return fmt.Errorf("remove nftables table inet %s: %w", nft.TableName, err)
	}
	fmt.Fprintf(out, "removed nftables table inet %s\n", nft.TableName)
	if err := addresses.Cleanup(addresses.DefaultProtocol); err != nil {
		return fmt.Errorf("remove egress addresses (protocol %d): %w", addresses.DefaultProtocol, err)
	}
	fmt.Fprintf(out, "removed egress addresses stamped with protocol %d\n", addresses.DefaultProtocol)
	if err := routing.Cleanup(routing.DefaultConfig()); err != nil {
		return fmt.Errorf("remove egressd's ip rules, routes and nexthops: %w", err)
	}
	fmt.Fprintf(out, "removed egressd's ip rules, routes and nexthops (protocol %d)\n", routing.DefaultConfig().Protocol)
	if err := os.Remove(pinRoot); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", pinRoot, err)
	}
	fmt.Fprintf(out, "removed %s\n", pinRoot)
	return nil
}

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

func trace(pinRoot string, args []string, out io.Writer) error {
	if len(args) < 2 || len(args) > 3 {
		return errors.New("usage: egressctl trace SRC DST [tcp|udp|sctp/PORT]")
	}
	src, err := netip.ParseAddr(args[0])
	if err != nil {
		return fmt.Errorf("SRC %q: %w", args[0], err)
	}
	dst, err := netip.ParseAddr(args[1])
	if err != nil {
		return fmt.Errorf("DST %q: %w", args[1], err)
	}
	var proto uint8
	var port uint16
	if len(args) == 3 {
		p, n, ok := strings.Cut(strings.ToLower(args[2]), "/")
		num, perr := strconv.ParseUint(n, 10, 16)
		var known bool
		proto, known = dataplane.ProtocolNumber(p)
		if !ok || !known || (proto != 6 && proto != 17 && proto != 132) || perr != nil || num == 0 {
			return fmt.Errorf("%q is not tcp|udp|sctp/PORT", args[2])
		}
		port = uint16(num)
	}
	in, err := classifier.Inspect(pinRoot)
	if err != nil {
		return err
	}
	defer in.Close()
	tr, err := in.Trace(src, dst, proto, port)
	if err != nil {
		return err
	}
	if tr.Namespace == "" {
		fmt.Fprintf(out, "%s is not a local pod egressd knows: its packets pass untouched\n", src)
		return nil
	}
	fmt.Fprintf(out, "source:   pod address %s in namespace %s\n", src, tr.Namespace)
	switch {
	case tr.Exempt:
		fmt.Fprintf(out, "firewall: not applied: %s is in the cluster or service networks\n", dst)
	case tr.Rule < 0:
		fmt.Fprintln(out, "firewall: allow (no rule matched)")
	default:
		fmt.Fprintf(out, "firewall: %s by rule %d of %s: %s\n", tr.Verdict, tr.Rule, tr.Namespace, tr.RuleText)
	}
	if tr.DSCP < 0 {
		fmt.Fprintln(out, "qos:      no EgressQoS rule: DSCP left as the pod set it")
	} else {
		fmt.Fprintf(out, "qos:      DSCP %d by rule %d: %s\n", tr.DSCP, tr.QoSRule, tr.QoSText)
	}
	return nil
}

// egressIP prints what this node does for EgressIP and external routes: hosted egress IPs, the
// SNAT map, and egressd's rules and tables.
func egressIP(out io.Writer) error {
	hosted, err := addresses.Hosted(addresses.DefaultProtocol)
	if err != nil {
		return fmt.Errorf("egress addresses: %w", err)
	}
	fmt.Fprintln(out, "egress IPs hosted here:")
	var lines []string
	for p, ifindex := range hosted {
		name := strconv.Itoa(ifindex)
		if ifi, err := net.InterfaceByIndex(ifindex); err == nil {
			name = ifi.Name
		}
		lines = append(lines, fmt.Sprintf("  %s on %s", p.Addr(), name))
	}
	slices.Sort(lines)
	fmt.Fprintln(out, strings.Join(append(lines, ""), "\n"))
	snat, err := nft.SNATEntries()
	if err != nil {
		return fmt.Errorf("SNAT map: %w", err)
	}
	fmt.Fprintln(out, "pods SNATed here (pod -> egress IP):")
	for _, e := range snat {
		fmt.Fprintf(out, "  %s -> %s\n", e.Pod, e.EgressIP)
	}
	routes, err := routing.Describe(routing.DefaultConfig())
	if err != nil {
		return fmt.Errorf("routing: %w", err)
	}
	fmt.Fprintln(out, "\nsteering (marked pod traffic to egress nodes or external gateways):")
	for _, r := range routes {
		fmt.Fprintln(out, "  "+r)
	}
	return nil
}
