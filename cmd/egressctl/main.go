// Command egressctl inspects and cleans up what egressd programmed on a node.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/egressd/egressd/dataplane/routing"
	"github.com/egressd/egressd/internal/version"
)

const help = `egressctl inspects what egressd programmed on this node.

Usage:
  egressctl firewall [--bpf-pin-root DIR]    EgressFirewall rules programmed per namespace,
                                             with the packets and bytes each one decided
  egressctl qos [--bpf-pin-root DIR]         EgressQoS rules programmed per namespace, with
                                             the packets each one marked
  egressctl trace [--bpf-pin-root DIR] [--metrics-address HOST:PORT] SRC DST [tcp|udp|sctp/PORT]
                                             what this node does with a new flow from pod
                                             address SRC: verdict, rule, DSCP, the routing
                                             mark (and its object, from the agent's metrics),
                                             the gateways it may take, the source address
                                             it leaves with
  egressctl routes [--metrics-address HOST:PORT]
                                             egressd's policy routing: rules by mark, tables
                                             with their gateways (live ones in the group),
                                             gateways kept out, and the agent's BFD sessions
                                             with their counters (read from its metrics)
  egressctl egressip [--metrics-address HOST:PORT]
                                             egress IPs this node hosts, the pods it SNATs to
                                             them, and egressd's routing
  egressctl cleanup [--bpf-pin-root DIR]     remove every kernel object egressd owns on this
                                             node (stop the agent first, or it re-creates them)
  egressctl version                          print the version
  egressctl help                             print this help

trace, routes, egressip and cleanup also take the agent's --rule-priority-base,
--rule-priority-count, --route-table-base and --route-table-count when it sets them.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the flags of the commands; each command reads those it needs.
type options struct {
	pinRoot        string
	metricsAddress string
	routing        routing.Config
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, help)
		return 2
	}
	cmd := args[0]
	switch cmd {
	case "version":
		fmt.Fprintln(stdout, "egressctl", version.String())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, help)
		return 0
	}
	commands := map[string]func(o options, args []string, out io.Writer) error{
		"cleanup":  func(o options, _ []string, out io.Writer) error { return cleanup(o, out) },
		"firewall": func(o options, _ []string, out io.Writer) error { return rules(o.pinRoot, false, out) },
		"qos":      func(o options, _ []string, out io.Writer) error { return rules(o.pinRoot, true, out) },
		"trace":    trace,
		"routes":   func(o options, _ []string, out io.Writer) error { return routes(o, out) },
		"egressip": func(o options, _ []string, out io.Writer) error { return egressIP(o, out) },
	}
	command, ok := commands[cmd]
	if !ok {
		fmt.Fprintf(stderr, "egressctl: unknown command %q\n\n%s", cmd, help)
		return 2
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := options{routing: routing.DefaultConfig()}
	fs.StringVar(&o.pinRoot, "bpf-pin-root", "/sys/fs/bpf/egressd", "the agent's --bpf-pin-root")
	fs.StringVar(&o.metricsAddress, "metrics-address", "127.0.0.1:9476", "host:port of the agent's metrics endpoint (its --metrics-bind-address), where its BFD sessions are read; \"0\" skips them")
	fs.IntVar(&o.routing.RulePriorityBase, "rule-priority-base", o.routing.RulePriorityBase, "the agent's --rule-priority-base")
	fs.IntVar(&o.routing.RulePriorityCount, "rule-priority-count", o.routing.RulePriorityCount, "the agent's --rule-priority-count")
	fs.IntVar(&o.routing.TableBase, "route-table-base", o.routing.TableBase, "the agent's --route-table-base")
	fs.IntVar(&o.routing.TableCount, "route-table-count", o.routing.TableCount, "the agent's --route-table-count")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if cmd != "trace" && fs.NArg() > 0 {
		fmt.Fprintf(stderr, "egressctl %s: unexpected arguments %q\n", cmd, fs.Args())
		return 2
	}
	if err := command(o, fs.Args(), stdout); err != nil {
		fmt.Fprintf(stderr, "egressctl %s: %v\n", cmd, err)
		return 1
	}
	return 0
}
