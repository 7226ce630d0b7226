package egressfirewall

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	corelisters "k8s.io/client-go/listers/core/v1"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/internal/dnsname"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// rules compiles one EgressFirewall's rules against the current nodes and DNS answers.
func rules(in *cluster.Input, ef *ovnv1.EgressFirewall, nodes *nodeSelection) ([]dataplane.FirewallRule, error) {
	// Upstream checks the index of each rule against the limit, so it accepts one rule more.
	if len(ef.Spec.Egress) > maxRules+1 {
		return nil, fmt.Errorf("egressFirewall for namespace %s has too many rules, max allowed number is %d", ef.Namespace, maxRules)
	}
	var rules []dataplane.FirewallRule
	var errs []error
	for i, r := range ef.Spec.Egress {
		rule := dataplane.FirewallRule{Index: i, Deny: r.Type != ovnv1.EgressFirewallRuleAllow, Text: ruleText(r)}
		var err error
		switch {
		case destinations(r.To) != 1:
			err = fmt.Errorf("rule destination must set exactly one of cidrSelector, dnsName and nodeSelector")
		case r.To.CIDRSelector != "":
			var p netip.Prefix
			if p, err = cluster.ParseCIDR(r.To.CIDRSelector); err == nil {
				rule.Prefixes = []netip.Prefix{p}
			}
		case r.To.DNSName != "":
			// Wildcards are supported, as upstream with its DNSNameResolver, which then checks
			// every name against this stricter pattern (and with its message).
			if !dnsName.MatchString(r.To.DNSName) {
				err = fmt.Errorf("invalid dns name used as rule destination, %s", r.To.DNSName)
				break
			}
			// Until the name first resolves (or, for a wildcard, a pod is answered for a name it
			// matches) it matches nothing, as upstream's empty address set.
			for _, a := range in.Lookup(dnsname.Canonical(r.To.DNSName)) {
				if !in.InNetworks(a) {
					rule.Prefixes = append(rule.Prefixes, netip.PrefixFrom(a, a.BitLen()))
				}
			}
		case r.To.NodeSelector != nil:
			rule.Prefixes, err = nodes.addresses(r.To.NodeSelector)
		}
		if err == nil {
			rule.Ports, err = ports(r.Ports)
		}
		if err != nil {
			// Upstream prints the cidrSelector here whatever the destination kind; so do we.
			errs = append(errs, fmt.Errorf("cannot create EgressFirewall Rule to destination %s for namespace %s: %w", r.To.CIDRSelector, ef.Namespace, err))
			continue
		}
		rules = append(rules, rule)
	}
	if len(errs) > 0 {
		// No partial result: the firewall fails as a whole. One line, as upstream's aggregate
		// prints several errors: "[e1, e2]".
		return nil, utilerrors.NewAggregate(errs)
	}
	return rules, nil
}

// dnsName is upstream's pattern of a rule's dnsName with DNSNameResolver (pkg/util
// egressfirewall.go dnsRegex): at least two labels of 1 to 63 characters, no hyphen at either
// end, one leading `*.` at most. The API's own pattern (api/k8sovn/v1) is looser.
var dnsName = regexp.MustCompile(`^(\*\.)?([a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?\.)+[a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?\.?$`)

// destinations counts the kinds of destination a rule sets; the API wants exactly one.
func destinations(to ovnv1.EgressFirewallDestination) int {
	n := 0
	for _, set := range []bool{to.CIDRSelector != "", to.DNSName != "", to.NodeSelector != nil} {
		if set {
			n++
		}
	}
	return n
}

// apiProtocols are the protocols of a rule's ports the API accepts (any case, as before).
var apiProtocols = map[string]bool{"tcp": true, "udp": true, "sctp": true}

// ports are a rule's ports as the API accepts them: TCP, UDP or SCTP, 1 to 65535 (not
// truncated into another port).
func ports(in []ovnv1.EgressFirewallPort) ([]dataplane.Port, error) {
	var out []dataplane.Port
	for _, p := range in {
		proto, ok := dataplane.ProtocolNumber(p.Protocol)
		if !ok || !apiProtocols[strings.ToLower(p.Protocol)] {
			return nil, fmt.Errorf("invalid protocol %q: want TCP, UDP or SCTP", p.Protocol)
		}
		if p.Port < 1 || p.Port > 65535 {
			return nil, fmt.Errorf("invalid port %d: want 1 to 65535", p.Port)
		}
		out = append(out, dataplane.Port{Protocol: proto, Port: uint16(p.Port)})
	}
	return out, nil
}

// nodeSelection picks the nodes of nodeSelector rules, each distinct selector once while no
// Node changed (the nodes' generation): the namespaces a node enforces often share one (their
// infrastructure nodes), and with thousands of nodes each pick reads every node's addresses.
type nodeSelection struct {
	generation uint64
	valid      bool
	lister     corelisters.NodeLister
	nodes      []*corev1.Node // listed at the first pick
	picked     map[string][]netip.Prefix
}

// at is the selection of the current nodes.
func (s *nodeSelection) at(in *cluster.Input) *nodeSelection {
	gen, known := in.Snap.Generations.Of(&corev1.Node{})
	if !s.valid || !known || gen != s.generation {
		*s = nodeSelection{generation: gen, valid: known, lister: in.Snap.Nodes}
	}
	return s
}

// addresses are every host address of the nodes a selector picks: the host-cidrs each agent
// publishes (all addresses, secondary ones included), or the Node's addresses.
func (s *nodeSelection) addresses(ls *metav1.LabelSelector) ([]netip.Prefix, error) {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, fmt.Errorf("rule destination has invalid node selector, err: %v", err)
	}
	if s == nil {
		return nil, nil // only checked
	}
	key := sel.String()
	if out, ok := s.picked[key]; ok {
		return out, nil
	}
	if s.nodes == nil {
		if s.nodes, err = s.lister.List(labels.Everything()); err != nil {
			return nil, err
		}
	}
	var out []netip.Prefix
	for _, n := range s.nodes {
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		for _, a := range cluster.HostAddresses(n) {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	if s.picked == nil {
		s.picked = map[string][]netip.Prefix{}
	}
	s.picked[key] = out
	return out, nil
}

// ruleText describes a rule for operators: "Deny to 0.0.0.0/0", "Allow to dnsName x ports TCP/443".
func ruleText(r ovnv1.EgressFirewallRule) string {
	var to string
	switch {
	case r.To.CIDRSelector != "":
		to = r.To.CIDRSelector
	case r.To.DNSName != "":
		to = "dnsName " + r.To.DNSName
	case r.To.NodeSelector != nil:
		to = "nodeSelector " + metav1.FormatLabelSelector(r.To.NodeSelector)
	}
	s := string(r.Type) + " to " + to
	if len(r.Ports) > 0 {
		ports := make([]string, len(r.Ports))
		for i, p := range r.Ports {
			ports[i] = fmt.Sprintf("%s/%d", p.Protocol, p.Port)
		}
		s += " ports " + strings.Join(ports, ",")
	}
	return s
}
