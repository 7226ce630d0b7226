package egressfirewall

import (
	"k8s.io/apimachinery/pkg/types"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
)

// memo keeps the compiled rules of EgressFirewalls whose result depends on their spec alone
// (no nodeSelector or dnsName rule), by UID and generation: with a thousand namespaces, a sync
// after one change compiles one firewall, not all of them.
type memo struct {
	firewalls map[types.UID]compiledFirewall
}

type compiledFirewall struct {
	generation int64
	rules      []dataplane.FirewallRule
	err        error
}

func (m *memo) firewall(ef *ovnv1.EgressFirewall) (compiledFirewall, bool) {
	c, ok := m.firewalls[ef.UID]
	return c, ok && c.generation == ef.Generation
}

func (m *memo) keep(ef *ovnv1.EgressFirewall, rules []dataplane.FirewallRule, err error) {
	for _, r := range ef.Spec.Egress {
		if r.To.NodeSelector != nil || r.To.DNSName != "" {
			return // depends on nodes or DNS answers too
		}
	}
	if m.firewalls == nil {
		m.firewalls = map[types.UID]compiledFirewall{}
	}
	m.firewalls[ef.UID] = compiledFirewall{generation: ef.Generation, rules: rules, err: err}
}

// forgetBut drops what is kept for firewalls no longer listed.
func (m *memo) forgetBut(efs []*ovnv1.EgressFirewall) {
	live := make(map[types.UID]bool, len(efs))
	for _, ef := range efs {
		live[ef.UID] = true
	}
	for uid := range m.firewalls {
		if !live[uid] {
			delete(m.firewalls, uid)
		}
	}
}
