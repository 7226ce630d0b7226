// Command egressctl inspects and cleans up what egressd programmed on a node.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/egressd/egressd/dataplane/routing"
	"github.com/egressd/egressd/internal/pinroot"
	"github.com/egressd/egressd/internal/version"
	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
)

const help = `egressctl inspects what egressd programmed on this node.

Usage: egressctl [flags] COMMAND [ARGS] [flags]   (flags go before or after the command)

Commands:
  status       one screen: the agent's version, the leader, the objects it programmed or
               failed to program (with the reasons), BFD sessions, the egress IPs hosted here
  firewall     EgressFirewall rules programmed per namespace (those with a pod on this node),
               with the packets and bytes each one decided
  qos          EgressQoS rules programmed per namespace (those with a pod on this node), with
               the packets each one marked
  trace SRC DST [tcp|udp|sctp/PORT]
               what this node does with a new flow from pod address SRC: verdict, rule, DSCP,
               the routing mark (and its object, from the agent's metrics), the gateways it
               may take, the source address it leaves with
  routes       egressd's policy routing: rules by mark, tables with their gateways (live ones
               in the group), gateways kept out, and the agent's BFD sessions with their
               counters (read from its metrics)
  egressip     egress IPs this node hosts, the pods it SNATs to them, and egressd's routing
  dns          the names of EgressFirewall dnsName rules, the rules naming them, the addresses
               the agent resolved and those learned from the DNS answers pods got (under a
               wildcard, by the name answered) with the time each has left (read next to the
               agent's --cni-socket)
  cleanup      remove every kernel object egressd owns on this node (stop the agent first,
               or it re-creates them); a step that fails does not stop the others, and
               exit status 1 names every step that failed
  version      print the version
  help         print this help

Flags:
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the flags of the commands; each command reads those it needs.
type options struct {
	pinRoot        string
	metricsAddress string
	routing        routing.Config
	// output is how the report is printed: text (tables and lines) or json.
	output string
	// cniConfDir and cniBinDir are where the agent installed egressd-cni (its --cni-conf-dir,
	// --cni-bin-dir); cleanup removes it from there. No conf dir: not installed.
	cniConfDir, cniBinDir string
	// cniSocket is the agent's --cni-socket: cleanup removes it, what the agent and its init
	// container keep next to it, and their directory.
	cniSocket string
}

// newFlagSet declares egressctl's flags, shared by every command, into o.
func newFlagSet(o *options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("egressctl", pflag.ContinueOnError)
	fs.SortFlags = false
	*o = options{routing: routing.DefaultConfig()}
	fs.StringVarP(&o.output, "output", "o", "text", "output format: text or json (the same report; json's field names are stable)")
	fs.StringVar(&o.pinRoot, "bpf-pin-root", pinroot.Default(), "the agent's --bpf-pin-root (status, firewall, qos, trace, cleanup; default $"+pinroot.Env+" or /sys/fs/bpf/egressd)")
	fs.StringVar(&o.metricsAddress, "metrics-address", "127.0.0.1:9476", "host:port of the agent's metrics endpoint (its --metrics-bind-address), where status, trace, routes and egressip read what only the agent knows; \"0\" skips it")
	fs.IntVar(&o.routing.RulePriorityBase, "rule-priority-base", o.routing.RulePriorityBase, "the agent's --rule-priority-base")
	fs.IntVar(&o.routing.RulePriorityCount, "rule-priority-count", o.routing.RulePriorityCount, "the agent's --rule-priority-count")
	fs.IntVar(&o.routing.TableBase, "route-table-base", o.routing.TableBase, "the agent's --route-table-base")
	fs.IntVar(&o.routing.TableCount, "route-table-count", o.routing.TableCount, "the agent's --route-table-count")
	fs.StringVar(&o.cniConfDir, "cni-conf-dir", "", "the agent's --cni-conf-dir: cleanup removes egressd-cni from the CNI configuration lists there (\"\": egressd-cni was not installed)")
	fs.StringVar(&o.cniSocket, "cni-socket", cniapi.DefaultSocket, "the agent's --cni-socket: cleanup puts back the reverse path filters the agent loosened (remembered next to it), and removes it and its directory")
	fs.StringVar(&o.cniBinDir, "cni-bin-dir", "/opt/cni/bin", "the host's CNI plugin directory (as mounted) where egressd-cni was installed (by the DaemonSet's init container, or the agent's --cni-bin-dir): cleanup removes its binaries there (with --cni-conf-dir)")
	return fs
}

// report is what a command found: one data model, printed as text or encoded as JSON.
type report interface {
	writeText(w io.Writer) error
}

// command reads one kind of report from the node.
type command struct {
	// takesArgs: the command takes arguments (only trace does).
	takesArgs bool
	read      func(o options, args []string) (report, error)
}

var commands = map[string]command{
	"status":   {read: func(o options, _ []string) (report, error) { return readStatus(o), nil }},
	"firewall": {read: func(o options, _ []string) (report, error) { return reading(readRules(o.pinRoot, false)) }},
	"qos":      {read: func(o options, _ []string) (report, error) { return reading(readRules(o.pinRoot, true)) }},
	"trace":    {takesArgs: true, read: func(o options, args []string) (report, error) { return reading(trace(o, args)) }},
	"routes":   {read: func(o options, _ []string) (report, error) { return reading(readRoutes(o)) }},
	"egressip": {read: func(o options, _ []string) (report, error) { return reading(readEgressIP(o)) }},
	"dns":      {read: func(o options, _ []string) (report, error) { return reading(readDNS(o, time.Now())) }},
	// cleanup's report says what it removed also when a step failed.
	"cleanup": {read: func(o options, _ []string) (report, error) { return cleanup(o) }},
	"version": {read: func(options, []string) (report, error) { return versionReport{Version: version.String()}, nil }},
}

// reading is a command's report, or none when reading it failed.
func reading[R report](r R, err error) (report, error) {
	if err != nil {
		return nil, err
	}
	return r, nil
}

// versionReport is egressctl's own version.
type versionReport struct {
	Version string `json:"version"`
}

func (v versionReport) writeText(w io.Writer) error {
	_, err := fmt.Fprintln(w, "egressctl", v.Version)
	return err
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := newFlagSet(&o)
	fs.SetOutput(io.Discard) // errors are printed below, once
	usage := help + fs.FlagUsages()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "egressctl: %v\n\n%s", err, usage)
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	name, cmdArgs := fs.Arg(0), fs.Args()[1:]
	if name == "help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	cmd, ok := commands[name]
	switch {
	case !ok:
		fmt.Fprintf(stderr, "egressctl: unknown command %q\n\n%s", name, usage)
		return 2
	case !cmd.takesArgs && len(cmdArgs) > 0:
		fmt.Fprintf(stderr, "egressctl %s: unexpected arguments %q\n", name, cmdArgs)
		return 2
	case !slices.Contains([]string{"text", "json"}, o.output):
		fmt.Fprintf(stderr, "egressctl %s: --output %q is not text or json\n", name, o.output)
		return 2
	}
	r, err := cmd.read(o, cmdArgs)
	if r != nil {
		if werr := write(stdout, r, o.output); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "egressctl %s: %v\n", name, err)
		return 1
	}
	return 0
}

// write prints r as text, or as indented JSON.
func write(w io.Writer, r report, output string) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false) // "rule 6101 -> table 7101", not "-\u003e"
		return enc.Encode(r)
	}
	return r.writeText(w)
}

// joinStrings joins the String of each value with ", ".
func joinStrings[T fmt.Stringer](vs []T) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = v.String()
	}
	return strings.Join(s, ", ")
}
