package routing

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/egressd/egressd/dataplane"
)

type wantedRule struct {
	origin dataplane.Origin
	key    ruleKey
}

type wantedRoute struct {
	origin dataplane.Origin
	key    routeKey
	route  dataplane.Route
}

// wanted maps the state to kernel numbers. What cannot be mapped (offsets out of range,
// malformed routes, one route wanted two ways) is left out and reported for its Origin.
func (c Config) wanted(s *dataplane.RoutingState) ([]wantedRule, []wantedRoute, map[dataplane.Origin]error) {
	errs := map[dataplane.Origin]error{}
	fail := func(o dataplane.Origin, err error) { errs[o] = errors.Join(errs[o], err) }
	var rules []wantedRule
	for _, r := range s.Rules {
		k, err := c.wantRule(r)
		if err != nil {
			fail(r.Origin, err)
			continue
		}
		rules = append(rules, wantedRule{origin: r.Origin, key: k})
	}
	var routes []wantedRoute
	seen := map[routeKey]int{}
	for _, t := range s.Tables {
		table, err := c.table(t.ID)
		if err != nil {
			fail(t.Origin, err)
			continue
		}
		for _, rt := range t.Routes {
			if err := checkRoute(rt); err != nil {
				fail(t.Origin, fmt.Errorf("table %d: %w", table, err))
				continue
			}
			k := keyOf(table, rt.Dst)
			if i, dup := seen[k]; dup {
				if !reflect.DeepEqual(routes[i].route, rt) {
					fail(t.Origin, fmt.Errorf("table %d: route to %s is also wanted, differently, by %v", table, k.dst, routes[i].origin))
				}
				continue
			}
			seen[k] = len(routes)
			routes = append(routes, wantedRoute{origin: t.Origin, key: k, route: rt})
		}
	}
	return rules, routes, errs
}

func checkRoute(rt dataplane.Route) error {
	if !rt.Dst.IsValid() {
		return errors.New("route without a destination")
	}
	ways := 0
	for _, set := range []bool{rt.Via != nil, len(rt.Nexthops) > 0, rt.Blackhole, rt.Throw} {
		if set {
			ways++
		}
	}
	if ways != 1 {
		return fmt.Errorf("route to %s: exactly one of Via, Nexthops, Blackhole and Throw must be set", rt.Dst)
	}
	if rt.Src.IsValid() && rt.Src.Is6() != rt.Dst.Addr().Is6() {
		return fmt.Errorf("route to %s: source %s is of the other family", rt.Dst, rt.Src)
	}
	hops := rt.Nexthops
	if rt.Via != nil {
		hops = []dataplane.Nexthop{*rt.Via}
	}
	for _, nh := range hops {
		switch {
		case !nh.Gateway.IsValid() && nh.Device == "":
			return fmt.Errorf("route to %s: a nexthop has neither gateway nor device", rt.Dst)
		case nh.Onlink && (nh.Device == "" || !nh.Gateway.IsValid()):
			return fmt.Errorf("route to %s: an onlink nexthop needs a gateway and a device", rt.Dst)
		case nh.Gateway.IsValid() && nh.Gateway.Is6() != rt.Dst.Addr().Is6():
			return fmt.Errorf("route to %s: gateway %s is of the other family", rt.Dst, nh.Gateway)
		}
	}
	return nil
}
