// Command egressctl inspects and cleans up what egressd programmed on a node.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/egressd/egressd/internal/version"
)

const help = `egressctl inspects what egressd programmed on this node.

Usage:
  egressctl version          print the version
  egressctl help             print this help

Coming with the features that program the node:
  egressctl firewall         EgressFirewall rules per namespace, with per-rule counters
  egressctl qos              EgressQoS rules per namespace, with marked-packet counters
  egressctl trace SRC DST [tcp|udp|sctp/PORT]
                             which firewall rule, DSCP, route and source IP a flow gets
  egressctl routes           external gateway, EgressIP and EgressService routing state
  egressctl bfd              BFD sessions to external gateways and their state
  egressctl cleanup          remove every kernel object egressd owns on this node
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
	default:
		fmt.Fprintf(stderr, "egressctl: unknown command %q\n\n%s", args[0], help)
		return 2
	}
	return 0
}
