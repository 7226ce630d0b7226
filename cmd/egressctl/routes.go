package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/egressd/egressd/dataplane/bfd"
	"github.com/egressd/egressd/dataplane/routing"
)

// routesReport is egressd's policy routing as this node's kernel holds it, with what only the
// agent knows: the BFD sessions to the gateways and the object of each steering mark.
type routesReport struct {
	programmed routing.Programmed
	// sessions are the agent's BFD sessions and paths the objects by mark, when its metrics
	// were read; metricsErr says why not.
	sessions   []bfd.SessionInfo
	paths      map[uint32]pathOf
	metricsErr error
}

func routes(o options, out io.Writer) error {
	r, err := readRoutes(context.Background(), o)
	if err != nil {
		return err
	}
	return printRoutes(out, r)
}

// readRoutes reads egressd's routing in the current network namespace, and the agent's
// metrics. An agent that cannot be reached is reported, not fatal: the kernel's view stands on
// its own (a gateway in a group is live).
func readRoutes(ctx context.Context, o options) (routesReport, error) {
	var r routesReport
	var err error
	if r.programmed, err = routing.Inspect(o.routing); err != nil {
		return r, err
	}
	families, err := scrape(ctx, o.metricsAddress)
	if err != nil {
		r.metricsErr = err
		return r, nil
	}
	r.paths = steeredPaths(families)
	r.sessions, r.metricsErr = bfd.SessionsFromMetrics(families)
	return r, nil
}

// printRoutes writes egressd's routing (printRouting), then the BFD sessions with their
// counters.
func printRoutes(out io.Writer, r routesReport) error {
	if err := printRouting(out, r); err != nil {
		return err
	}
	fmt.Fprintln(out)
	switch {
	case r.metricsErr != nil:
		fmt.Fprintf(out, "BFD sessions: the agent's metrics %v; the groups above hold the live gateways\n", r.metricsErr)
		return nil
	case len(r.sessions) == 0:
		fmt.Fprintln(out, "BFD sessions: none")
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "BFD SESSION\tSTATE\tDETECTION TIME\tSENT\tRECEIVED\tTRANSITIONS\tDETECTIONS")
	for _, s := range r.sessions {
		c := s.Counters
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\n", s.Key, s.State, s.DetectionTime, c.PacketsSent, c.PacketsReceived, c.Transitions, c.Detections)
	}
	return w.Flush()
}

// printRouting writes the rules with the object of their mark, the tables' routes with their
// gateways, and the gateways kept out of their groups.
func printRouting(out io.Writer, r routesReport) error {
	p := r.programmed
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RULE\tFAMILY\tFWMARK\tFROM\tTABLE\tPATH OF")
	for _, rule := range p.Rules {
		from := "all"
		if rule.Src.IsValid() {
			from = rule.Src.String()
		}
		fwmark := "-" // a rule by source (EgressService's network)
		if rule.Mask != 0 {
			fwmark = fmt.Sprintf("%#x/%#x", rule.Mark, rule.Mask)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\n", rule.Priority, family(rule.IPv6), fwmark, from, rule.Table, pathName(r.paths, rule.Mark))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TABLE\tDESTINATION\tROUTE")
	for _, rt := range p.Routes {
		fmt.Fprintf(w, "%d\t%s\t%s\n", rt.Table, rt.Dst, describeRoute(rt, r.sessions))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(p.Standby) > 0 {
		fmt.Fprintf(out, "\ngateways kept out of their groups (BFD session not Up): %s\n", gatewaysWithBFD(p.Standby, r.sessions))
	}
	return nil
}

// describeRoute says where a route sends flows: a blackhole, one gateway, or a group.
func describeRoute(rt routing.ProgrammedRoute, sessions []bfd.SessionInfo) string {
	var s string
	switch {
	case rt.Blackhole:
		s = "blackhole (no live gateway: dropped, never leaked)"
	case rt.Group != 0:
		s = fmt.Sprintf("nexthop group %d, per flow over %s", rt.Group, gatewaysWithBFD(rt.Gateways, sessions))
	case len(rt.Gateways) > 0:
		s = "via " + gatewaysWithBFD(rt.Gateways, sessions)
	default:
		s = "device route"
	}
	if rt.Src.IsValid() {
		s += ", source " + rt.Src.String()
	}
	return s
}

// gatewaysWithBFD lists gateways, each with the state of its BFD sessions when it has any.
func gatewaysWithBFD(gws []netip.Addr, sessions []bfd.SessionInfo) string {
	out := make([]string, len(gws))
	for i, gw := range gws {
		var states []string
		for _, s := range sessions {
			if s.Key.Peer == gw {
				states = append(states, s.State.String())
			}
		}
		out[i] = gw.String()
		if len(states) > 0 {
			slices.Sort(states)
			out[i] += " (BFD " + strings.Join(slices.Compact(states), "/") + ")"
		}
	}
	return strings.Join(out, ", ")
}

func family(v6 bool) string {
	if v6 {
		return "ipv6"
	}
	return "ipv4"
}

// pathName is the object of a mark, "-" when unknown.
func pathName(paths map[uint32]pathOf, mark uint32) string {
	if p, ok := paths[mark]; ok {
		return p.String()
	}
	return "-"
}
