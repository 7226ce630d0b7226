package egressfirewall

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/internal/dnsname"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// validDNSName says, label by label, what upstream's DNSNameResolver mode accepts: an optional
// leading `*.`, an optional trailing dot, at least two labels of 1 to 63 letters, digits and
// hyphens, none starting or ending with a hyphen.
func validDNSName(name string) bool {
	labels := strings.Split(strings.TrimSuffix(strings.TrimPrefix(name, "*."), "."), ".")
	if len(labels) < 2 {
		return false
	}
	for _, l := range labels {
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// An EgressFirewall is written by a namespace's users. Whatever its rule's destination
// (cidrSelector, dnsName, the label value of a nodeSelector) and port say, compiling it never
// panics; a rule the API would refuse fails the firewall, with no rules (the dataplane keeps
// what it enforced), not some of them; an accepted one compiles to what it says, ports included.
func FuzzCompileRule(f *testing.F) {
	// typ, cidrSelector, dnsName, nodeSelector's role, protocol, port
	f.Add("Allow", "192.0.2.0/24", "", "", "TCP", int32(443))
	f.Add("Allow", "10.1.2.3/16", "", "", "", int32(0))
	f.Add("Deny", "::/0", "", "", "SCTP", int32(9))
	f.Add("Deny", "", "WWW.example.com", "", "UDP", int32(53))
	f.Add("Allow", "", "*.example.com", "", "", int32(0))
	f.Add("Allow", "", "", "infra", "TCP", int32(6443))
	f.Add("Deny", "010.0.0.0/8", "", "", "", int32(0))
	f.Add("Deny", "10.0.0.0/08", "", "", "TCP", int32(65535))
	f.Add("Deny", "0.0.0.0/0", "", "", "tcp", int32(65536))
	f.Add("Allow", "192.0.2.0/24", "example.com", "", "ICMP", int32(-1))
	nodes := []*corev1.Node{
		node("n1", map[string]string{"role": "infra"}, `["172.18.0.10/24","fc00::10/64"]`, "172.18.0.10"),
		node("n2", map[string]string{"role": "worker"}, "", "172.18.0.11"),
	}
	lookup := func(name string) []netip.Addr {
		if strings.Contains(name, "example") {
			return []netip.Addr{netip.MustParseAddr("203.0.113.20"), netip.MustParseAddr("10.244.1.1")}
		}
		return nil
	}
	networks := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	f.Fuzz(func(t *testing.T, typ, cidr, dns, role, proto string, port int32) {
		r := ovnv1.EgressFirewallRule{Type: ovnv1.EgressFirewallRuleType(typ),
			To: ovnv1.EgressFirewallDestination{CIDRSelector: cidr, DNSName: dns}}
		if role != "" {
			r.To.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"role": role}}
		}
		if proto != "" || port != 0 {
			r.Ports = []ovnv1.EgressFirewallPort{{Protocol: proto, Port: port}}
		}
		// A valid rule after it: it must not be compiled alone when the first fails.
		e := ef("a", r, cidrRule(ovnv1.EgressFirewallRuleDeny, "0.0.0.0/0"))
		var fw dataplane.Firewall
		fw.Rules, fw.Err = rules(&cluster.Input{Networks: networks, Lookup: lookup}, e, &nodeSelection{nodes: nodes})

		// What the API accepts.
		dests := 0
		for _, set := range []bool{cidr != "", dns != "", role != ""} {
			if set {
				dests++
			}
		}
		valid := dests == 1
		var want []netip.Prefix
		switch {
		case cidr != "":
			p, err := cluster.ParseCIDR(cidr)
			valid = valid && err == nil
			want = []netip.Prefix{p}
		case dns != "":
			valid = valid && validDNSName(dns)
			for _, a := range lookup(dnsname.Canonical(dns)) {
				if !slices.ContainsFunc(networks, func(p netip.Prefix) bool { return p.Contains(a) }) {
					want = append(want, netip.PrefixFrom(a, a.BitLen()))
				}
			}
		case role != "":
			valid = valid && len(validation.IsValidLabelValue(role)) == 0
			if role == "infra" {
				want = []netip.Prefix{netip.MustParsePrefix("172.18.0.10/32"), netip.MustParsePrefix("fc00::10/128"), netip.MustParsePrefix("172.18.0.10/32")}
			}
		}
		var wantPorts []dataplane.Port
		if r.Ports != nil {
			n, known := map[string]uint8{"tcp": 6, "udp": 17, "sctp": 132}[strings.ToLower(proto)]
			valid = valid && known && port >= 1 && port <= 65535
			wantPorts = []dataplane.Port{{Protocol: n, Port: uint16(port)}}
		}

		if !valid {
			if fw.Err == nil || fw.Rules != nil {
				t.Fatalf("invalid rule %+v: compiled to %+v, error %v; want an error and no rules", r, fw.Rules, fw.Err)
			}
			return
		}
		if fw.Err != nil {
			t.Fatalf("valid rule %+v: %v", r, fw.Err)
		}
		if len(fw.Rules) != 2 {
			t.Fatalf("%d rules, want 2: %+v", len(fw.Rules), fw.Rules)
		}
		got := fw.Rules[0]
		if got.Index != 0 || got.Deny != (r.Type != ovnv1.EgressFirewallRuleAllow) {
			t.Errorf("rule %+v: index %d, deny %v", r, got.Index, got.Deny)
		}
		if !slices.Equal(got.Prefixes, want) {
			t.Errorf("rule %+v: prefixes %v, want %v", r, got.Prefixes, want)
		}
		if !slices.Equal(got.Ports, wantPorts) {
			t.Errorf("rule %+v: ports %v, want %v", r, got.Ports, wantPorts)
		}
		if fw.Rules[1].Index != 1 || !fw.Rules[1].Deny {
			t.Errorf("second rule: %+v", fw.Rules[1])
		}
	})
}
