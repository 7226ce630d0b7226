package nodeagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/watchers/dnsnames"
)

// Upstream limits and annotation keys (SEMANTICS.md sections 0.2, 1.2, 2.2).
const (
	maxFirewallRules = 8000
	maxQoSRules      = 1000
	HostCIDRsKey     = "k8s.ovn.org/host-cidrs"
	ACLLoggingKey    = "k8s.ovn.org/acl-logging"
)

// aclSeverities are the severities the acl-logging annotation accepts ("" does not log).
var aclSeverities = map[string]bool{"alert": true, "warning": true, "notice": true, "info": true, "debug": true, "": true}

// aclLog reads a namespace's acl-logging annotation, {"deny": "alert", "allow": "notice"}. An
// unreadable annotation or an unknown severity logs nothing for that verdict, as upstream.
func aclLog(in *input, namespace string) dataplane.ACLLog {
	ns, err := in.snap.Namespaces.Get(namespace)
	if err != nil || ns.Annotations[ACLLoggingKey] == "" {
		return dataplane.ACLLog{}
	}
	var a struct{ Allow, Deny string }
	if json.Unmarshal([]byte(ns.Annotations[ACLLoggingKey]), &a) != nil {
		return dataplane.ACLLog{}
	}
	if !aclSeverities[a.Allow] {
		a.Allow = ""
	}
	if !aclSeverities[a.Deny] {
		a.Deny = ""
	}
	return dataplane.ACLLog{Allow: a.Allow, Deny: a.Deny}
}

var protocols = map[string]uint8{"TCP": 6, "UDP": 17, "SCTP": 132}

// compileFirewalls turns every EgressFirewall into its namespace's ordered rules. A policy that
// cannot be compiled is handed on with Err, so that the dataplane keeps what it enforced.
func compileFirewalls(in *input, into *dataplane.State) error {
	efs, err := in.snap.EgressFirewalls.List(labels.Everything())
	if err != nil {
		return err
	}
	nodes, err := in.snap.Nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	sort.Slice(efs, func(i, j int) bool { return efs[i].Namespace < efs[j].Namespace })
	for _, ef := range efs {
		if ef.Name != "default" {
			continue // the API server rejects other names; nothing to enforce
		}
		fw := dataplane.Firewall{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: ef.Namespace, Name: ef.Name}}
		if m, ok := in.memo.firewall(ef); ok {
			fw.Rules, fw.Err = m.rules, m.err
		} else {
			fw.Rules, fw.Err = firewallRules(in, ef, nodes)
			in.memo.keepFirewall(ef, fw.Rules, fw.Err)
		}
		fw.Log = aclLog(in, ef.Namespace)
		into.Firewalls = append(into.Firewalls, fw)
	}
	in.memo.forgetFirewallsBut(efs)
	return nil
}

func firewallRules(in *input, ef *ovnv1.EgressFirewall, nodes []*corev1.Node) ([]dataplane.FirewallRule, error) {
	if len(ef.Spec.Egress) > maxFirewallRules {
		return nil, fmt.Errorf("egressFirewall for namespace %s has too many rules, max allowed number is %d", ef.Namespace, maxFirewallRules)
	}
	var rules []dataplane.FirewallRule
	var errs []error
	for i, r := range ef.Spec.Egress {
		rule := dataplane.FirewallRule{Index: i, Deny: r.Type != ovnv1.EgressFirewallRuleAllow, Text: ruleText(r)}
		var err error
		switch {
		case r.To.CIDRSelector != "":
			var p netip.Prefix
			if p, err = netip.ParsePrefix(r.To.CIDRSelector); err == nil {
				rule.Prefixes = []netip.Prefix{p.Masked()}
			}
		case r.To.DNSName != "":
			if strings.HasPrefix(r.To.DNSName, "*.") {
				err = fmt.Errorf("wildcard dns name is not supported as rule destination, %s", r.To.DNSName)
				break
			}
			// Until the name first resolves it matches nothing, as upstream's empty address set.
			in.dnsNames = append(in.dnsNames, r.To.DNSName)
			for _, a := range in.lookup(dnsnames.Canonical(r.To.DNSName)) {
				if !slices.ContainsFunc(in.cluster, func(p netip.Prefix) bool { return p.Contains(a) }) {
					rule.Prefixes = append(rule.Prefixes, netip.PrefixFrom(a, a.BitLen()))
				}
			}
		case r.To.NodeSelector != nil:
			rule.Prefixes, err = nodeAddresses(r.To.NodeSelector, nodes)
		}
		if err != nil {
			// Upstream prints the cidrSelector here whatever the destination kind; so do we.
			errs = append(errs, fmt.Errorf("cannot create EgressFirewall Rule to destination %s for namespace %s: %w", r.To.CIDRSelector, ef.Namespace, err))
			continue
		}
		for _, p := range r.Ports {
			rule.Ports = append(rule.Ports, dataplane.Port{Protocol: protocols[p.Protocol], Port: uint16(p.Port)})
		}
		rules = append(rules, rule)
	}
	return rules, errors.Join(errs...)
}

// nodeAddresses are every host address of the nodes a selector picks: the host-cidrs each
// agent publishes (all addresses, secondary ones included), or the Node's addresses.
func nodeAddresses(ls *metav1.LabelSelector, nodes []*corev1.Node) ([]netip.Prefix, error) {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, fmt.Errorf("rule destination has invalid node selector, err: %v", err)
	}
	var out []netip.Prefix
	for _, n := range nodes {
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		for _, a := range hostAddresses(n) {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return out, nil
}

func hostAddresses(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	var cidrs []string
	if err := json.Unmarshal([]byte(n.Annotations[HostCIDRsKey]), &cidrs); err == nil {
		for _, c := range cidrs {
			if p, err := netip.ParsePrefix(c); err == nil {
				out = append(out, p.Addr())
			}
		}
	}
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, ip)
		}
	}
	return out
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
