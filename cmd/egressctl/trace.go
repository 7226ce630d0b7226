package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/nft"
	"github.com/egressd/egressd/dataplane/routing"
)

// kindExternalRoute is the kind of the objects whose paths end at external gateways (the
// others' end at an egress node).
const kindExternalRoute = "AdminPolicyBasedExternalRoute"

// traced is what each facility of this node does with one new flow.
type traced struct {
	src, dst   netip.Addr
	proto      uint8 // 0: none given
	port       uint16
	classifier classifier.Trace
	egress     nft.PodEgress
	// routed: one of egressd's rules matches the classifier's mark; rule is that rule and
	// route the route of its table for dst (nil when the table is not egressd's).
	routed bool
	rule   routing.ProgrammedRule
	route  *routing.ProgrammedRoute
	// path is the object of the mark, from the agent's metrics; nil when unknown.
	path *pathOf
}

// traceReport is what this node does with one new flow: the facts, and one sentence per
// step of the flow's way out (source, firewall, qos, routing, egress) saying them.
type traceReport struct {
	Source      netip.Addr `json:"source"`
	Destination netip.Addr `json:"destination"`
	Protocol    string     `json:"protocol,omitempty"`
	Port        uint16     `json:"port,omitempty"`
	// Namespace of the source pod; empty when the classifier knows no pod of that address.
	Namespace string `json:"namespace,omitempty"`
	// Verdict is the firewall's, allow or deny; Firewall the rule that decided it (nil: no
	// rule matched, or the destination is exempt).
	Verdict  string         `json:"verdict"`
	Firewall *firewallMatch `json:"firewall,omitempty"`
	// QoS is the EgressQoS rule that sets the DSCP, nil for none.
	QoS *qosMatch `json:"qos,omitempty"`
	// Mark is the routing mark the classifier sets, Path the object whose path it selects.
	Mark uint32  `json:"mark,omitempty"`
	Path *pathOf `json:"path,omitempty"`
	// Rule and Route are egressd's ip rule that selects the flow and its table's route for
	// the destination (nil: none, or the table is not egressd's).
	Rule  *routingRule  `json:"rule,omitempty"`
	Route *routingRoute `json:"route,omitempty"`
	// SNATTo is the egress IP this node SNATs the source to, when it does.
	SNATTo netip.Addr  `json:"snatTo,omitzero"`
	Steps  []traceStep `json:"steps"`
}

// firewallMatch is the rule of a namespace's EgressFirewall that decided; Logged: the verdict
// is written as an ACL log line.
type firewallMatch struct {
	Rule   int    `json:"rule"`
	Spec   string `json:"spec"`
	Logged bool   `json:"logged"`
}

// qosMatch is the rule of a namespace's EgressQoS that sets the DSCP.
type qosMatch struct {
	Rule int    `json:"rule"`
	Spec string `json:"spec"`
	DSCP int    `json:"dscp"`
}

// traceStep is one step of the flow's way out and what happens there.
type traceStep struct {
	Step string `json:"step"`
	Text string `json:"text"`
}

func (r traceReport) writeText(out io.Writer) error {
	for _, s := range r.Steps {
		if _, err := fmt.Fprintf(out, "%-10s%s\n", s.Step+":", s.Text); err != nil {
			return err
		}
	}
	return nil
}

func trace(o options, args []string) (traceReport, error) {
	if len(args) < 2 || len(args) > 3 {
		return traceReport{}, errors.New("usage: egressctl trace SRC DST [tcp|udp|sctp/PORT]")
	}
	src, err := netip.ParseAddr(args[0])
	if err != nil {
		return traceReport{}, fmt.Errorf("SRC %q: %w", args[0], err)
	}
	dst, err := netip.ParseAddr(args[1])
	if err != nil {
		return traceReport{}, fmt.Errorf("DST %q: %w", args[1], err)
	}
	if src.Is4() != dst.Is4() {
		return traceReport{}, fmt.Errorf("SRC %s and DST %s are of different families", src, dst)
	}
	var proto uint8
	var port uint16
	if len(args) == 3 {
		if proto, port, err = parsePort(args[2]); err != nil {
			return traceReport{}, err
		}
	}
	t, err := traceFlow(o, src, dst, proto, port)
	if err != nil {
		return traceReport{}, err
	}
	r := newTraceReport(t)
	if len(args) == 3 {
		r.Protocol, r.Port = strings.ToLower(strings.Split(args[2], "/")[0]), port
	}
	return r, nil
}

// parsePort reads tcp|udp|sctp/PORT.
func parsePort(s string) (uint8, uint16, error) {
	name, num, ok := strings.Cut(strings.ToLower(s), "/")
	proto, known := dataplane.ProtocolNumber(name)
	port, err := strconv.ParseUint(num, 10, 16)
	if !ok || !known || (proto != 6 && proto != 17 && proto != 132) || err != nil || port == 0 {
		return 0, 0, fmt.Errorf("%q is not tcp|udp|sctp/PORT", s)
	}
	return proto, uint16(port), nil
}

// traceFlow reads, in the current network namespace, what the classifier, nftables and
// egressd's routing do with a new flow.
func traceFlow(o options, src, dst netip.Addr, proto uint8, port uint16) (traced, error) {
	t := traced{src: src, dst: dst, proto: proto, port: port}
	in, err := classifier.Inspect(o.pinRoot)
	if err != nil {
		return t, err
	}
	defer in.Close()
	if t.classifier, err = in.Trace(src, dst, proto, port); err != nil {
		return t, fmt.Errorf("classifier: %w", err)
	}
	if t.egress, err = nft.EgressOf(src); err != nil {
		return t, fmt.Errorf("EgressIP SNAT of %s: %w", src, err)
	}
	if t.classifier.Verdict == "deny" {
		return t, nil
	}
	progr, err := routing.Inspect(o.routing)
	if err != nil {
		return t, fmt.Errorf("routing: %w", err)
	}
	t.rule, t.route, t.routed = progr.Select(src, dst, t.classifier.Mark)
	if t.classifier.Mark != 0 {
		// Best effort: without the agent's metrics the kernel's view is complete, only the
		// object's name is missing.
		if families, err := scrape(context.Background(), o.metricsAddress); err == nil {
			if p, ok := steeredPaths(families)[t.classifier.Mark]; ok {
				t.path = &p
			}
		}
	}
	return t, nil
}

// newTraceReport is the report of t, with a sentence per step.
func newTraceReport(t traced) traceReport {
	tr := t.classifier
	r := traceReport{Source: t.src, Destination: t.dst, Namespace: tr.Namespace, Verdict: tr.Verdict, Mark: tr.Mark,
		Path: t.path, SNATTo: t.egress.SNATTo}
	if tr.Namespace != "" && !tr.Exempt && tr.Rule >= 0 {
		r.Firewall = &firewallMatch{Rule: tr.Rule, Spec: tr.RuleText, Logged: tr.Logged}
	}
	if tr.Namespace != "" && tr.DSCP >= 0 {
		r.QoS = &qosMatch{Rule: tr.QoSRule, Spec: tr.QoSText, DSCP: tr.DSCP}
	}
	if t.routed {
		r.Rule = &routingRule{Priority: t.rule.Priority, Family: family(t.rule.IPv6), Mark: t.rule.Mark, Mask: t.rule.Mask,
			From: t.rule.Src, Table: t.rule.Table, Path: t.path}
		if rt := t.route; rt != nil {
			r.Route = &routingRoute{Table: rt.Table, Destination: rt.Dst, Blackhole: rt.Blackhole, Throw: rt.Throw, Group: rt.Group,
				Gateways: gateways(rt.Gateways, nil), Source: rt.Src}
		}
	}
	step := func(name, text string) { r.Steps = append(r.Steps, traceStep{name, text}) }
	if tr.Namespace == "" {
		step("source", t.src.String()+" is no pod the classifier knows (no firewall, QoS or mark): its packets pass it untouched")
	} else {
		step("source", "pod address "+t.src.String()+" in namespace "+tr.Namespace)
		switch {
		case tr.Frontend:
			step("firewall", fmt.Sprintf("not applied here: %s %s/%d is a Service's frontend, judged after DNAT by the backend", t.dst, dataplane.ProtocolName(t.proto), t.port))
		case tr.Exempt:
			step("firewall", "not applied: "+t.dst.String()+" is in the cluster or service networks")
		case tr.Rule < 0:
			step("firewall", "allow (no rule matched)")
		default:
			logged := ""
			if tr.Logged {
				logged = " (ACL-logged)"
			}
			step("firewall", fmt.Sprintf("%s by rule %d of %s%s: %s", tr.Verdict, tr.Rule, tr.Namespace, logged, tr.RuleText))
		}
		if tr.DSCP < 0 {
			step("qos", "no EgressQoS rule: DSCP left as the pod set it")
		} else {
			step("qos", fmt.Sprintf("DSCP %d by rule %d: %s", tr.DSCP, tr.QoSRule, tr.QoSText))
		}
	}
	routing := routingStep(t)
	if t.classifier.Frontend && t.classifier.Mark != 0 {
		routing += " (a Service's frontend: only if DNAT sends it out of the cluster; to a pod or a node the mark is taken off)"
	}
	step("routing", routing)
	step("egress", egressStep(t))
	return r
}

// routingStep says where egressd's routing sends the flow: by the classifier's mark, or by its
// source (an EgressService's network).
func routingStep(t traced) string {
	tr := t.classifier
	switch {
	case tr.Verdict == "deny":
		return "not routed: dropped by the firewall"
	case !t.routed && tr.Mark == 0 && tr.SteerExempt:
		return "no mark: " + t.dst.String() + " is a cluster network, a load-balancer IP or a node address (not steered; a Service's backend outside the cluster gets the mark after DNAT)"
	case !t.routed && tr.Mark == 0:
		return "no mark: the node's own routing"
	case !t.routed:
		return fmt.Sprintf("mark %#x: none of egressd's rules selects it: the node's own routing", tr.Mark)
	}
	by := fmt.Sprintf("mark %#x", tr.Mark)
	switch {
	case tr.Mark == 0:
		by = "source " + t.rule.Src.String()
	case t.path != nil:
		by += " (" + t.path.String() + ")"
	}
	head := fmt.Sprintf("%s: rule %d -> table %d", by, t.rule.Priority, t.rule.Table)
	switch r := t.route; {
	case r == nil:
		return head + " (not egressd's: the table of the pod's network)"
	case r.Blackhole:
		return fmt.Sprintf("%s, %s: blackhole (no live gateway)", head, r.Dst)
	case r.Group != 0:
		return fmt.Sprintf("%s, %s: nexthop group %d, spread per flow over %s", head, r.Dst, r.Group, joinStrings(r.Gateways))
	}
	return fmt.Sprintf("%s, %s: %s", head, t.route.Dst, nextHop(t.route))
}

// nextHop is where a route (not a blackhole nor a group) sends a flow: its gateway, or its
// interface for a route on link.
func nextHop(r *routing.ProgrammedRoute) string {
	if len(r.Gateways) == 0 && r.Device != "" {
		return "dev " + r.Device
	}
	return "via " + joinStrings(r.Gateways)
}

// egressStep says with which source address, and towards which next hop, the flow leaves this
// node, or why it does not.
func egressStep(t traced) string {
	tr, snat := t.classifier, t.egress.SNATTo
	source := "source " + t.src.String() + " (the pod address: egressd keeps it)"
	if snat.IsValid() {
		source = "source " + snat.String() + " (egress IP, SNATed on this node)"
	}
	switch {
	case tr.Verdict == "deny":
		return "none: dropped by the firewall"
	case tr.SteerExempt:
		return "not steered nor SNATed: the node's own routing, source as the CNI makes it"
	case t.routed && t.route != nil && t.route.Blackhole:
		return "none: dropped by egressd's routing (the path has no live gateway)"
	case t.routed && t.route != nil:
		hops := source + ", next hop " + joinStrings(t.route.Gateways)
		if len(t.route.Gateways) == 0 && t.route.Device != "" {
			hops = source + ", out of " + t.route.Device + " (on link)"
		}
		switch {
		case snat.IsValid():
			return hops
		case t.path == nil:
			return hops + " (an egress node, which SNATs it to its egress IP, or an external gateway)"
		case t.path.Kind == kindExternalRoute:
			return hops + " (external gateways of " + t.path.String() + ": they see the pod address)"
		}
		return hops + " (egress node of " + t.path.String() + ", which SNATs it to its egress IP)"
	case t.routed:
		return source + ", through table " + strconv.FormatUint(uint64(t.rule.Table), 10)
	case snat.IsValid():
		return source + ", the node's own routing"
	case t.egress.Guarded:
		return "none: dropped by the EgressIP leak guard (a selected pod that is neither steered nor SNATed here)"
	}
	return "source as the CNI makes it (egressd does not rewrite it), the node's own routing"
}
