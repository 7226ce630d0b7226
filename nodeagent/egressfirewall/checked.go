package egressfirewall

import (
	"maps"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// checked is every EgressFirewall's status as this node checks it (whether its rules compile),
// kept across syncs. While the EgressFirewalls' journal (watchers.Generations.ChangedSince)
// names those that changed, a sync looks at them alone: with 10,000 namespaces, an edit of one
// cost every node a walk of all 10,000 (half of its sync). The firewalls of the namespaces
// enforced here are compiled apart, which sets their status (set).
type checked struct {
	valid    bool
	cursor   uint64 // of the journal, as of the last look
	statuses map[dataplane.Origin]error
	// handed is statuses as last handed on (Part.Statuses, read only), nil once they changed:
	// a copy of 10,000 statuses at every sync was a quarter of what an edit's sync allocated.
	handed *cluster.Shared
	uids   map[dataplane.Origin]types.UID // every firewall's, enforced ones too: what the memo forgets
	local  map[string]bool                // the namespaces enforced as of the last look
}

// check brings c.checked up to date: the firewalls that changed since the last look, and those
// of the namespaces enforced then but no longer; every firewall when which changed is not known.
func (c *Compiler) check(in *cluster.Input, local map[string]bool) error {
	keys, next, known := in.Snap.Generations.ChangedSince(&ovnv1.EgressFirewall{}, c.checked.cursor)
	if !c.checked.valid || !known {
		efs, err := in.Snap.EgressFirewalls.List(labels.Everything())
		if err != nil {
			c.checked.valid = false
			return err
		}
		c.checked = checked{valid: true, cursor: next, statuses: make(map[dataplane.Origin]error, len(efs)),
			uids: make(map[dataplane.Origin]types.UID, len(efs)), local: local}
		for _, ef := range efs {
			c.checkOne(in, ef, local)
		}
		c.memo.forgetBut(efs)
		return nil
	}
	for ns := range c.checked.local {
		if !local[ns] {
			keys = append(keys, ns+"/default")
		}
	}
	for _, key := range keys {
		ns, name, err := cache.SplitMetaNamespaceKey(key)
		if err != nil || name != "default" {
			continue
		}
		ef, err := in.Snap.EgressFirewalls.EgressFirewalls(ns).Get(name)
		if err != nil { // gone (a lister's only error)
			o := origin(ns, name)
			c.memo.forget(c.checked.uids[o])
			c.checked.remove(o)
			delete(c.checked.uids, o)
			continue
		}
		c.checkOne(in, ef, local)
	}
	c.checked.cursor, c.checked.local = next, local
	return nil
}

// checkOne checks ef, unless its namespace is enforced here (compileAll sets its status then).
func (c *Compiler) checkOne(in *cluster.Input, ef *ovnv1.EgressFirewall, local map[string]bool) {
	if ef.Name != "default" {
		return // the API server rejects other names; nothing to enforce
	}
	o := origin(ef.Namespace, ef.Name)
	if uid, ok := c.checked.uids[o]; ok && uid != ef.UID {
		c.memo.forget(uid) // deleted and created again
	}
	c.checked.uids[o] = ef.UID
	if local[ef.Namespace] {
		return
	}
	// Its rules' nodes and names do not matter yet.
	m, ok := c.memo.firewall(ef, false, 0, 0)
	if !ok {
		_, m.err = rules(in, ef, nil)
		c.memo.keep(ef, false, 0, 0, nil, m.err)
	}
	c.checked.set(o, m.err)
}

// set records o's status; a status that says the same changes nothing.
func (c *checked) set(o dataplane.Origin, err error) {
	if old, ok := c.statuses[o]; ok && (old == nil) == (err == nil) && (err == nil || old.Error() == err.Error()) {
		return
	}
	c.statuses[o], c.handed = err, nil
}

func (c *checked) remove(o dataplane.Origin) {
	if _, ok := c.statuses[o]; ok {
		delete(c.statuses, o)
		c.handed = nil
	}
}

// part is the statuses for a part to hand on: a copy, made again only once they changed.
func (c *checked) part() *cluster.Shared {
	if c.handed == nil {
		c.handed = cluster.NewShared(maps.Clone(c.statuses))
	}
	return c.handed
}

func origin(namespace, name string) dataplane.Origin {
	return dataplane.Origin{Kind: cluster.KindEgressFirewall, Namespace: namespace, Name: name}
}
