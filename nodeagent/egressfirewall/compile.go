// Package egressfirewall compiles EgressFirewalls into this node's part of the desired state:
// each namespace's ordered rules for the classifier, and what the rules deny of Service
// backends outside the cluster networks, judged after DNAT. Pure: no kernel, no API writes.
package egressfirewall

import (
	"encoding/json"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// Upstream limits and annotation keys (SEMANTICS.md sections 0.2, 1.2).
const (
	maxRules      = 8000
	ACLLoggingKey = "k8s.ovn.org/acl-logging"
)

// Part is what EgressFirewall adds to the node state.
type Part struct {
	Firewalls []dataplane.Firewall
	// Version changes whenever Firewalls is compiled afresh (dataplane.ClassifierState).
	Version       uint64
	BackendDenies []dataplane.BackendDeny
	// DNSNames are the names the rules refer to (wildcards included), to resolve and keep fresh
	// and to learn from the answers pods get.
	DNSNames []string
	// DNSNamespaces are the namespaces with a dnsName rule: the DNS answers to their pods are
	// read on the way (dataplane.DNSSnoop).
	DNSNamespaces []string
}

// Compiler compiles EgressFirewalls, remembering the rules of those that depend on their spec
// alone across syncs, and the whole list while nothing it was compiled from changed.
type Compiler struct {
	memo memo
	list compiledList
}

// compiledList is the last list of firewalls compiled, kept under the generation of the objects
// it was compiled from (EgressFirewalls, Nodes, Namespaces) when it depends on nothing else (no
// dnsName rule): a sync for a new pod hands the dataplane the same list, which it recognizes
// without comparing a thousand namespaces' rules again.
type compiledList struct {
	generation uint64
	valid      bool
	firewalls  []dataplane.Firewall
	version    uint64 // counts the lists compiled
}

// Compile turns every EgressFirewall into its namespace's ordered rules, and judges the local
// pods' Service backends by them. A policy that cannot be compiled is handed on with Err, so
// that the dataplane keeps what it enforced.
func (c *Compiler) Compile(in *cluster.Input) (Part, error) {
	var part Part
	// Read before the caches: a change landing in between moves it (see Generations.Of).
	gen, known := in.Snap.Generations.Of(&ovnv1.EgressFirewall{}, &corev1.Node{}, &corev1.Namespace{})
	if known && c.list.valid && c.list.generation == gen {
		part.Firewalls = c.list.firewalls
	} else {
		var err error
		if part, err = c.compileAll(in); err != nil {
			c.list.valid = false
			return part, err
		}
		c.list = compiledList{generation: gen, valid: known && len(part.DNSNames) == 0, firewalls: part.Firewalls,
			version: c.list.version + 1}
	}
	part.Version = c.list.version
	var err error
	part.BackendDenies, err = serviceBackendDenies(in, part.Firewalls)
	return part, err
}

// compileAll compiles every EgressFirewall's rules.
func (c *Compiler) compileAll(in *cluster.Input) (Part, error) {
	var part Part
	efs, err := in.Snap.EgressFirewalls.List(labels.Everything())
	if err != nil {
		return part, err
	}
	nodes, err := in.Snap.Nodes.List(labels.Everything())
	if err != nil {
		return part, err
	}
	sort.Slice(efs, func(i, j int) bool { return efs[i].Namespace < efs[j].Namespace })
	for _, ef := range efs {
		if ef.Name != "default" {
			continue // the API server rejects other names; nothing to enforce
		}
		fw := dataplane.Firewall{Origin: dataplane.Origin{Kind: cluster.KindEgressFirewall, Namespace: ef.Namespace, Name: ef.Name}}
		nodesGen, names, keep := inputs(in, ef)
		if m, ok := c.memo.firewall(ef, nodesGen, names); ok && keep {
			fw.Rules, fw.Err = m.rules, m.err
		} else {
			fw.Rules, fw.Err = rules(in, ef, nodes)
			if keep {
				c.memo.keep(ef, nodesGen, names, fw.Rules, fw.Err)
			}
		}
		named := false
		for _, r := range ef.Spec.Egress {
			if r.To.DNSName != "" {
				part.DNSNames = append(part.DNSNames, r.To.DNSName)
				named = true
			}
		}
		if named {
			part.DNSNamespaces = append(part.DNSNamespaces, ef.Namespace)
		}
		fw.Log = aclLog(in, ef.Namespace)
		part.Firewalls = append(part.Firewalls, fw)
	}
	c.memo.forgetBut(efs)
	return part, nil
}

// aclSeverities are the severities the acl-logging annotation accepts ("" does not log).
var aclSeverities = map[string]bool{"alert": true, "warning": true, "notice": true, "info": true, "debug": true, "": true}

// aclLog reads a namespace's acl-logging annotation, {"deny": "alert", "allow": "notice"}. An
// unreadable annotation or an unknown severity logs nothing for that verdict, as upstream.
func aclLog(in *cluster.Input, namespace string) dataplane.ACLLog {
	ns, err := in.Snap.Namespaces.Get(namespace)
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
