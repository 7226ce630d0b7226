package routing

import (
	"errors"
	"maps"
	"slices"

	"github.com/egressd/egressd/dataplane"
)

// Prune removes what egressd owns and s no longer wants: rules first (nothing selects a table
// any more), then routes, then nexthop groups and the objects no kept group or ECMP route uses.
// Nothing outside egressd's ranges or without its protocol is touched. Prune does not need the
// BFD state: objects of members that are down stay, for when they come back.
func (r *Router) Prune(s *dataplane.RoutingState) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rules, routes, _ := r.cfg.wanted(s)
	if len(rules) == 0 && len(routes) == 0 && r.empty {
		return nil
	}
	k, err := r.read()
	if err != nil {
		return err
	}
	var errs []error
	wantRule := map[ruleKey]bool{}
	for _, w := range rules {
		wantRule[w.key] = true
	}
	for _, o := range k.rules {
		if !o.ok || !wantRule[o.key] {
			errs = append(errs, r.deleteRule(o))
		}
	}

	wantRoute := map[routeKey]bool{} // true: ECMP
	for _, w := range routes {
		wantRoute[w.key] = len(w.route.Nexthops) > 0
	}
	for _, rt := range append(slices.Collect(maps.Values(k.routes)), k.extra...) {
		if _, ok := wantRoute[rt.key]; !ok {
			errs = append(errs, r.nl.deleteRoute(rt.key, k.proto))
			delete(k.routes, rt.key)
		}
	}

	// Keep every nexthop a remaining route uses (even one Apply failed to move off it: deleting
	// it would delete the route), the groups of wanted ECMP routes, and their members.
	keep := map[uint32]bool{}
	for _, rt := range k.routes {
		keep[rt.nhid] = true
	}
	for key, id := range r.groups {
		if wantRoute[key] {
			keep[id] = true
		} else {
			delete(r.groups, key)
		}
	}
	for key, ids := range r.members {
		if !wantRoute[key] {
			delete(r.members, key)
			continue
		}
		for _, id := range ids {
			keep[id] = true
		}
	}
	for id := range keep {
		if nh, ok := k.owned(id); ok {
			for _, m := range nh.group {
				keep[m] = true
			}
		}
	}
	// Groups before their members: removing a member first would change the group.
	for _, groups := range []bool{true, false} {
		for _, id := range slices.Sorted(maps.Keys(k.nexthops)) {
			if nh, ok := k.owned(id); ok && !keep[id] && (nh.group != nil) == groups {
				errs = append(errs, r.nl.deleteNexthop(id))
			}
		}
	}
	err = errors.Join(errs...)
	r.empty = err == nil && len(rules) == 0 && len(routes) == 0
	return err
}
