package kernel

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/dataplane"
)

// removal is one facility's removal of what the state no longer wants.
type removal struct {
	facility string
	// what it removes, as the log says it.
	what  string
	prune func(s *dataplane.State, routes *dataplane.RoutingState) error
}

// facilityRemovals are the removals in the order they run: the reverse of the installs.
func (d *Applier) facilityRemovals() []removal {
	return []removal{
		{"routing", "routing egressd no longer wants", func(_ *dataplane.State, routes *dataplane.RoutingState) error {
			return d.routing.Prune(routes)
		}},
		{"tunnel", "tunnel entries egressd no longer wants", func(s *dataplane.State, _ *dataplane.RoutingState) error {
			return d.tunnel.Prune(&s.Tunnel)
		}},
		{"addresses", "egress addresses no longer assigned here", func(s *dataplane.State, _ *dataplane.RoutingState) error {
			return d.addresses.Prune(s.Addresses)
		}},
	}
}

// prune runs the removals, each whatever the others did, and returns those that failed by
// facility (nil when none did). A failure leaves a stale rule, route, tunnel entry or address
// in place: the caller retries soon rather than at the next resync, and it is counted.
func (d *Applier) prune(s *dataplane.State, routes *dataplane.RoutingState) map[string]error {
	var failed map[string]error
	for _, r := range d.removals {
		err := r.prune(s, routes)
		if err == nil {
			continue
		}
		if failed == nil {
			failed = map[string]error{}
		}
		failed[r.facility] = err
		d.pruneFailures.WithLabelValues(r.facility).Inc()
		d.log.Error("remove "+r.what, "facility", r.facility, "err", err)
	}
	return failed
}

func newPruneFailures() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egressd_dataplane_prune_failures_total",
		Help: "Removals of kernel objects egressd no longer wants (rules, routes and nexthops; tunnel entries; egress addresses) that failed, by facility (routing, tunnel, addresses): the objects stay until a removal succeeds. The sync is retried with a backoff (100 ms doubling to 30 s) while they fail.",
	}, []string{"facility"})
}
