package egressfirewall

import (
	"hash/fnv"

	"k8s.io/apimachinery/pkg/types"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/internal/dnsname"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// memo keeps the compiled rules of EgressFirewalls by UID and generation, with what else they
// were compiled from: the nodes (the Node informer's change count) for a nodeSelector rule, and
// the addresses each dnsName rule's name had. With ten thousand namespaces, a sync after one
// change, or after one name's new answer, compiles that firewall, not all of them. Of a
// firewall the node does not enforce it keeps only whether its rules compile.
type memo struct {
	firewalls map[types.UID]compiledFirewall
	// lastValid is each firewall's last version whose rules compiled (the cache's object when
	// it compiled; later versions of its generation share its rules: watchers.sameRules),
	// enforced while a later one does not compile.
	lastValid map[types.UID]*ovnv1.EgressFirewall
}

type compiledFirewall struct {
	generation int64
	// enforced: compiled for this node (rules kept), else only checked.
	enforced bool
	// nodes is the nodes' change count the rules were compiled at (0: no nodeSelector rule);
	// names, a hash of the addresses of its dnsName rules' names (0: none).
	nodes, names uint64
	rules        []dataplane.FirewallRule
	err          error
}

// inputs are what ef's rules read besides its spec: the change count of the nodes sel picks
// from when it has a nodeSelector rule (ok false when unknown: then it is not kept), and the
// hash of its names' addresses when it has dnsName rules.
func inputs(in *cluster.Input, ef *ovnv1.EgressFirewall, sel *nodeSelection) (nodes, names uint64, ok bool) {
	var dnsNames []string
	for _, r := range ef.Spec.Egress {
		switch {
		case r.To.NodeSelector != nil && nodes == 0:
			if !sel.valid {
				return 0, 0, false
			}
			nodes = sel.generation + 1 // the selection's own: 0 means "no nodeSelector rule"
		case r.To.DNSName != "":
			dnsNames = append(dnsNames, r.To.DNSName)
		}
	}
	if len(dnsNames) > 0 {
		names = namesHash(in, dnsNames) | 1 // 0 means "no dnsName rule"
	}
	return nodes, names, true
}

// namesHash is a hash of the current addresses of names (DNS names of rules; 0: none).
func namesHash(in *cluster.Input, names []string) uint64 {
	if len(names) == 0 {
		return 0
	}
	h := fnv.New64a()
	for _, n := range names {
		h.Write([]byte(n))
		for _, a := range in.Lookup(dnsname.Canonical(n)) {
			h.Write(a.AsSlice())
		}
	}
	return h.Sum64()
}

func (m *memo) firewall(ef *ovnv1.EgressFirewall, enforced bool, nodes, names uint64) (compiledFirewall, bool) {
	c, ok := m.firewalls[ef.UID]
	return c, ok && c.generation == ef.Generation && c.enforced == enforced && c.nodes == nodes && c.names == names
}

func (m *memo) keep(ef *ovnv1.EgressFirewall, enforced bool, nodes, names uint64, rules []dataplane.FirewallRule, err error) {
	if m.firewalls == nil {
		m.firewalls = map[types.UID]compiledFirewall{}
	}
	m.firewalls[ef.UID] = compiledFirewall{generation: ef.Generation, enforced: enforced, nodes: nodes, names: names, rules: rules, err: err}
	if err == nil {
		if m.lastValid == nil {
			m.lastValid = map[types.UID]*ovnv1.EgressFirewall{}
		}
		m.lastValid[ef.UID] = ef
	}
}

// forget drops what is kept for the firewall uid.
func (m *memo) forget(uid types.UID) {
	delete(m.firewalls, uid)
	delete(m.lastValid, uid)
}

// forgetBut drops what is kept for firewalls no longer listed.
func (m *memo) forgetBut(efs []*ovnv1.EgressFirewall) {
	live := make(map[types.UID]bool, len(efs))
	for _, ef := range efs {
		live[ef.UID] = true
	}
	for uid := range m.firewalls {
		if !live[uid] {
			m.forget(uid)
		}
	}
	for uid := range m.lastValid {
		if !live[uid] {
			m.forget(uid)
		}
	}
}
