// Command egressctl inspects and cleans up what egressd programmed on a node.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/tcx"
	"github.com/egressd/egressd/internal/version"
)

const help = `egressctl inspects what egressd programmed on this node.

Usage:
  egressctl version                          print the version
  egressctl cleanup [--bpf-pin-root DIR]     remove every kernel object egressd owns on this
                                             node (stop the agent first, or it re-creates them)
  egressctl help                             print this help

Coming with the features that program the node:
  egressctl firewall         EgressFirewall rules per namespace, with per-rule counters
  egressctl qos              EgressQoS rules per namespace, with marked-packet counters
  egressctl trace SRC DST [tcp|udp|sctp/PORT]
                             which firewall rule, DSCP, route and source IP a flow gets
  egressctl routes           external gateway, EgressIP and EgressService routing state
  egressctl bfd              BFD sessions to external gateways and their state
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
	case "cleanup":
		fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
		fs.SetOutput(stderr)
		pinRoot := fs.String("bpf-pin-root", "/sys/fs/bpf/egressd", "the agent's --bpf-pin-root")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if err := cleanup(*pinRoot, stdout); err != nil {
			fmt.Fprintln(stderr, "egressctl cleanup:", err)
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
	if err := os.Remove(pinRoot); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", pinRoot, err)
	}
	fmt.Fprintf(out, "removed %s\n", pinRoot)
	return nil
}
