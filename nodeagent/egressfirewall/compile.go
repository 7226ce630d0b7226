// Package egressfirewall compiles EgressFirewalls into this node's part of the desired state:
// each namespace's ordered rules for the classifier, and what the rules deny of Service
// backends outside the cluster networks, judged after DNAT. Pure: no kernel, no API writes.
package egressfirewall

import (
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

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
	// Firewalls are the rules of the namespaces with a pod on this node: those it enforces.
	// A namespace's firewall is compiled for the node when its first pod here is (its CNI ADD
	// waits for that), so that a node of a cluster of 10,000 firewalls holds the few it needs.
	Firewalls []dataplane.Firewall
	// Version changes whenever Firewalls is compiled afresh (dataplane.ClassifierState).
	Version uint64
	// Statuses are every EgressFirewall with its compile error: the node reports on each,
	// enforced here or not (its rules are checked all the same). Read only: shared by the
	// parts compiled until a status changes.
	Statuses      *cluster.Shared
	BackendDenies []dataplane.BackendDeny
	// DNSNames are the names the enforced rules refer to (wildcards included), to resolve and
	// keep fresh and to learn from the answers pods get.
	DNSNames []string
	// DNSNamespaces are the enforced namespaces with a dnsName rule: the DNS answers to their
	// pods are read on the way (dataplane.DNSSnoop).
	DNSNamespaces []string
}

// Compiler compiles EgressFirewalls, remembering the rules of those that depend on their spec
// alone across syncs, and the whole list while nothing it was compiled from changed.
type Compiler struct {
	memo    memo
	list    compiledList
	checked checked
	nodes   nodeSelection
}

// compiledList is the last part compiled, kept under what it was compiled from: the generation
// of the objects (EgressFirewalls, Nodes, Namespaces), the namespaces it enforces, the cluster
// networks and the addresses of its dnsName rules' names. A sync for a new pod of a namespace
// already enforced, or for any pod of another node, hands the dataplane the same list, which
// it recognizes without comparing the namespaces' rules again; on an egress node serving
// 10,000 pods of other nodes, those are most syncs.
type compiledList struct {
	generation uint64
	local      map[string]bool
	networks   []netip.Prefix
	names      uint64 // namesHash of part.DNSNames
	valid      bool
	part       Part
	version    uint64 // counts the lists compiled
}

// keeps tells whether the list was compiled from these inputs.
func (l *compiledList) keeps(in *cluster.Input, gen uint64, local map[string]bool) bool {
	return l.valid && l.generation == gen && maps.Equal(l.local, local) && slices.Equal(l.networks, in.Networks) &&
		l.names == namesHash(in, l.part.DNSNames)
}

// Compile checks every EgressFirewall, turns those of the namespaces with a pod here into
// their ordered rules, and judges the local pods' Service backends by them. A policy that
// cannot be compiled is handed on with Err, so that the dataplane keeps what it enforced.
func (c *Compiler) Compile(in *cluster.Input) (Part, error) {
	local := map[string]bool{}
	for _, p := range in.Pods {
		local[p.Origin.Namespace] = true
	}
	var part Part
	// Read before the caches: a change landing in between moves it (see Generations.Of).
	gen, known := in.Snap.Generations.Of(&ovnv1.EgressFirewall{}, &corev1.Node{}, &corev1.Namespace{})
	if known && c.list.keeps(in, gen, local) {
		part = c.list.part
	} else {
		var err error
		if part, err = c.compileAll(in, local); err != nil {
			c.list.valid = false
			return part, err
		}
		part.Version = c.list.version + 1
		c.list = compiledList{generation: gen, local: local, networks: slices.Clone(in.Networks), names: namesHash(in, part.DNSNames),
			valid: known, part: part, version: part.Version}
	}
	var err error
	part.BackendDenies, err = serviceBackendDenies(in, part.Firewalls)
	return part, err
}

// compileAll brings the statuses of every EgressFirewall up to date, and compiles the rules of
// the firewalls of the local namespaces.
func (c *Compiler) compileAll(in *cluster.Input, local map[string]bool) (Part, error) {
	if err := c.check(in, local); err != nil {
		return Part{}, err
	}
	var part Part
	nodes := c.nodes.at(in)
	for ns := range local {
		ef, err := in.Snap.EgressFirewalls.EgressFirewalls(ns).Get("default")
		if err != nil {
			continue // none (a lister's only error)
		}
		fw := dataplane.Firewall{Origin: origin(ef.Namespace, ef.Name)}
		c.checked.uids[fw.Origin] = ef.UID // forgotten by the memo once gone, as those checked
		nodesGen, names, keep := inputs(in, ef, nodes)
		if m, ok := c.memo.firewall(ef, true, nodesGen, names); ok && keep {
			fw.Rules, fw.Err = m.rules, m.err
		} else {
			fw.Rules, fw.Err = rules(in, ef, nodes)
			if keep {
				c.memo.keep(ef, true, nodesGen, names, fw.Rules, fw.Err)
			}
		}
		c.checked.set(fw.Origin, fw.Err)
		enforced := ef
		if last := c.memo.lastValid[ef.UID]; fw.Err != nil && last != nil {
			// Fail closed: the rules in force are the last valid ones, also on a node where
			// the namespace was not enforced when they were (its first pod came since).
			if r, err := rules(in, last, nodes); err == nil {
				fw.Rules, fw.Err, enforced = r, nil, last
			}
		}
		named := false
		for _, r := range enforced.Spec.Egress {
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
	part.Statuses = c.checked.part()
	// Sorted, so equal inputs give equal states.
	slices.SortFunc(part.Firewalls, func(a, b dataplane.Firewall) int { return strings.Compare(a.Origin.Namespace, b.Origin.Namespace) })
	slices.Sort(part.DNSNames)
	slices.Sort(part.DNSNamespaces)
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
