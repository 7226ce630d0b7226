package routing

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Describe lists, for egressctl, what egressd's routing holds in the current network
// namespace: its rules, and the routes of its tables with the gateways each spreads over.
func Describe(cfg Config) ([]string, error) {
	r, err := New(cfg)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	k, err := r.read()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, or := range k.rules {
		rule := or.rule
		family := "ipv4"
		if rule.Family == unix.AF_INET6 {
			family = "ipv6"
		}
		out = append(out, fmt.Sprintf("rule %d %s fwmark %#x/%#x lookup %d", rule.Priority, family, rule.Mark, derefMask(rule.Mask), rule.Table))
	}
	var routes []string
	for key, rt := range k.routes {
		var via string
		switch {
		case rt.typ == unix.RTN_BLACKHOLE:
			via = "blackhole"
		case rt.nhid != 0:
			var gws []string
			nh := k.nexthops[rt.nhid]
			for _, id := range append(nh.group, rt.nhid) {
				if m, ok := k.nexthops[id]; ok && m.gw.IsValid() {
					gws = append(gws, m.gw.String())
				}
			}
			via = "nexthop group " + fmt.Sprint(rt.nhid) + " via " + strings.Join(gws, ", ")
		default:
			via = "via " + rt.gw.String()
		}
		routes = append(routes, fmt.Sprintf("table %d %s %s", key.table, key.dst, via))
	}
	slices.Sort(routes)
	return append(out, routes...), nil
}

func derefMask(m *uint32) uint32 {
	if m == nil {
		return 0
	}
	return *m
}
