package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/egressd/egressd/dataplane/bfd"
	"github.com/egressd/egressd/dataplane/routing"
)

// routingReport is egressd's policy routing as this node's kernel holds it, with the object of
// each steering mark when the agent's metrics say it.
type routingReport struct {
	Rules  []routingRule  `json:"rules"`
	Routes []routingRoute `json:"routes"`
	// Standby are the gateways kept out of their groups: their BFD session is not Up.
	Standby []gateway `json:"standby"`
}

// routingRule is `ip rule priority Priority [from From] [fwmark Mark/Mask] lookup Table`.
type routingRule struct {
	Priority int          `json:"priority"`
	Family   string       `json:"family"`
	Mark     uint32       `json:"mark,omitempty"`
	Mask     uint32       `json:"mask,omitempty"`
	From     netip.Prefix `json:"from,omitzero"`
	Table    uint32       `json:"table"`
	// Path is the object whose path the mark selects; nil when unknown or by source.
	Path *pathOf `json:"path,omitempty"`
}

// routingRoute is a route of one of egressd's tables.
type routingRoute struct {
	Table       uint32       `json:"table"`
	Destination netip.Prefix `json:"destination"`
	// Blackhole: no live gateway, flows are dropped, never leaked.
	Blackhole bool `json:"blackhole,omitempty"`
	// Throw: the lookup goes on to main (a cluster network: marked packets never go there).
	Throw bool `json:"throw,omitempty"`
	// Group is the nexthop group spreading flows over Gateways, 0 for a single gateway.
	Group    uint32     `json:"group,omitempty"`
	Gateways []gateway  `json:"gateways"`
	Source   netip.Addr `json:"source,omitzero"`
}

// gateway is a next hop with the states of the agent's BFD sessions to it.
type gateway struct {
	Address netip.Addr `json:"address"`
	BFD     []string   `json:"bfd,omitempty"`
}

func (g gateway) String() string {
	if len(g.BFD) == 0 {
		return g.Address.String()
	}
	return g.Address.String() + " (BFD " + strings.Join(g.BFD, "/") + ")"
}

// bfdSession is one of the agent's BFD sessions with its counters.
type bfdSession struct {
	Peer          netip.Addr `json:"peer"`
	Interface     string     `json:"interface,omitempty"`
	State         string     `json:"state"`
	DetectionTime duration   `json:"detectionTime"`
	Sent          uint64     `json:"packetsSent"`
	Received      uint64     `json:"packetsReceived"`
	Transitions   uint64     `json:"transitions"`
	Detections    uint64     `json:"detections"`
}

// duration is written as Go writes durations ("900ms"), in text and JSON alike.
type duration time.Duration

func (d duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// routesReport is egressd's routing with the agent's BFD sessions; MetricsError says why the
// agent's metrics were not read (the kernel's view stands alone then: a gateway in a group is
// live).
type routesReport struct {
	routingReport
	BFDSessions  []bfdSession `json:"bfdSessions"`
	MetricsError string       `json:"metricsError,omitempty"`
}

// readRoutes reads egressd's routing in the current network namespace, and the agent's
// metrics. An agent that cannot be reached is reported, not fatal.
func readRoutes(o options) (routesReport, error) {
	r := routesReport{BFDSessions: []bfdSession{}}
	p, err := routing.Inspect(o.routing)
	if err != nil {
		return r, err
	}
	var sessions []bfd.SessionInfo
	var paths map[uint32]pathOf
	families, err := scrape(context.Background(), o.metricsAddress)
	if err == nil {
		paths = steeredPaths(families)
		sessions, err = bfd.SessionsFromMetrics(families)
	}
	if err != nil {
		r.MetricsError = err.Error()
	}
	r.routingReport = newRoutingReport(p, paths, sessions)
	r.BFDSessions = newBFDSessions(sessions)
	return r, nil
}

// readBFDSessions are the agent's BFD sessions from its metrics.
func readBFDSessions(families map[string]*dto.MetricFamily) ([]bfdSession, error) {
	sessions, err := bfd.SessionsFromMetrics(families)
	return newBFDSessions(sessions), err
}

func newBFDSessions(sessions []bfd.SessionInfo) []bfdSession {
	out := []bfdSession{}
	for _, s := range sessions {
		c := s.Counters
		out = append(out, bfdSession{Peer: s.Key.Peer, Interface: s.Key.Interface, State: s.State.String(),
			DetectionTime: duration(s.DetectionTime), Sent: c.PacketsSent, Received: c.PacketsReceived,
			Transitions: c.Transitions, Detections: c.Detections})
	}
	return out
}

// newRoutingReport is the kernel's routing p, with the objects of the marks and the BFD states
// of the gateways.
func newRoutingReport(p routing.Programmed, paths map[uint32]pathOf, sessions []bfd.SessionInfo) routingReport {
	r := routingReport{Rules: []routingRule{}, Routes: []routingRoute{}, Standby: gateways(p.Standby, sessions)}
	for _, rule := range p.Rules {
		out := routingRule{Priority: rule.Priority, Family: family(rule.IPv6), Mark: rule.Mark, Mask: rule.Mask, From: rule.Src, Table: rule.Table}
		if path, ok := paths[rule.Mark]; ok && rule.Mask != 0 {
			out.Path = &path
		}
		r.Rules = append(r.Rules, out)
	}
	for _, rt := range p.Routes {
		r.Routes = append(r.Routes, routingRoute{Table: rt.Table, Destination: rt.Dst, Blackhole: rt.Blackhole, Throw: rt.Throw, Group: rt.Group,
			Gateways: gateways(rt.Gateways, sessions), Source: rt.Src})
	}
	return r
}

// gateways are addresses, each with the states of its BFD sessions.
func gateways(addrs []netip.Addr, sessions []bfd.SessionInfo) []gateway {
	out := make([]gateway, len(addrs))
	for i, a := range addrs {
		out[i].Address = a
		for _, s := range sessions {
			if s.Key.Peer == a {
				out[i].BFD = append(out[i].BFD, s.State.String())
			}
		}
		slices.Sort(out[i].BFD)
		out[i].BFD = slices.Compact(out[i].BFD)
	}
	return out
}

// writeText writes egressd's routing, then the BFD sessions with their counters.
func (r routesReport) writeText(out io.Writer) error {
	if err := r.routingReport.writeText(out); err != nil {
		return err
	}
	fmt.Fprintln(out)
	switch {
	case r.MetricsError != "":
		fmt.Fprintf(out, "BFD sessions: the agent's metrics %s; the groups above hold the live gateways\n", r.MetricsError)
		return nil
	case len(r.BFDSessions) == 0:
		fmt.Fprintln(out, "BFD sessions: none")
		return nil
	}
	return writeBFDSessions(out, r.BFDSessions)
}

func writeBFDSessions(out io.Writer, sessions []bfdSession) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "BFD SESSION\tSTATE\tDETECTION TIME\tSENT\tRECEIVED\tTRANSITIONS\tDETECTIONS")
	for _, s := range sessions {
		key := s.Peer.String()
		if s.Interface != "" {
			key += "%" + s.Interface
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\n", key, s.State, time.Duration(s.DetectionTime), s.Sent, s.Received, s.Transitions, s.Detections)
	}
	return w.Flush()
}

// writeText writes the rules with the object of their mark, the tables' routes with their
// gateways, and the gateways kept out of their groups.
func (r routingReport) writeText(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RULE\tFAMILY\tFWMARK\tFROM\tTABLE\tPATH OF")
	for _, rule := range r.Rules {
		from := "all"
		if rule.From.IsValid() {
			from = rule.From.String()
		}
		fwmark := "-" // a rule by source (EgressService's network)
		if rule.Mask != 0 {
			fwmark = fmt.Sprintf("%#x/%#x", rule.Mark, rule.Mask)
		}
		path := "-"
		if rule.Path != nil {
			path = rule.Path.String()
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\n", rule.Priority, rule.Family, fwmark, from, rule.Table, path)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TABLE\tDESTINATION\tROUTE")
	for _, rt := range r.Routes {
		fmt.Fprintf(w, "%d\t%s\t%s\n", rt.Table, rt.Destination, describeRoute(rt))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(r.Standby) > 0 {
		fmt.Fprintf(out, "\ngateways kept out of their groups (BFD session not Up): %s\n", joinStrings(r.Standby))
	}
	return nil
}

// describeRoute says where a route sends flows: a blackhole, one gateway, or a group.
func describeRoute(rt routingRoute) string {
	var s string
	switch {
	case rt.Blackhole:
		s = "blackhole (no live gateway: dropped, never leaked)"
	case rt.Throw:
		s = "throw (looked up in main: a cluster network)"
	case rt.Group != 0:
		s = fmt.Sprintf("nexthop group %d, per flow over %s", rt.Group, joinStrings(rt.Gateways))
	case len(rt.Gateways) > 0:
		s = "via " + joinStrings(rt.Gateways)
	default:
		s = "device route"
	}
	if rt.Source.IsValid() {
		s += ", source " + rt.Source.String()
	}
	return s
}

func family(v6 bool) string {
	if v6 {
		return "ipv6"
	}
	return "ipv4"
}
