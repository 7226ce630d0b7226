package kernel

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/routing"
	"github.com/egressd/egressd/dataplane/rpfilter"
)

// routingFacility is the tables of the steered paths (groups of the live gateways), then the
// rules that select them by mark; and the reverse path filters and checks their traffic meets.
type routingFacility struct {
	router *routing.Router
	// loosener loosens the reverse path filter of the interfaces replies come in through (nil:
	// it is left strict, and reported).
	loosener *rpfilter.Loosener
	// strictWarned are the interfaces reversePath last warned of.
	strictWarned   []string
	strictRPFilter *prometheus.GaugeVec
	// checks6 are the IPv6 reverse path checks reversePath6 last found dropping egressd's
	// traffic, read at checks6Read while egressd routed through checks6Paths; checks6Warned
	// those it has warned of; ipv6RPCheck exports them.
	checks6       []rpfilter.Check6
	checks6Read   time.Time
	checks6Paths  string
	checks6Warned map[string]bool
	ipv6RPCheck   *prometheus.GaugeVec
	log           *slog.Logger
}

func (*routingFacility) name() string { return "routing" }

// section is the routing state with the routes of egress IPs' interfaces copied in, as they
// are now (after the addresses phase placed the IPs).
func (f *routingFacility) section(p *pass) any {
	p.routes = f.router.WithLinkRoutes(&p.state.Routing)
	return *p.routes
}

// install copies the routes of egress IPs' interfaces on secondary networks into their tables
// as they are now (after the addresses phase placed the IPs), then writes the tables and rules.
func (f *routingFacility) install(p *pass) map[dataplane.Origin]error {
	if p.routes == nil {
		f.section(p)
	}
	defer f.reversePath6(tunnel6(&p.state.Tunnel))
	defer f.reversePath(p.state.Routing.SteeredFrom, p.state.Routing.SteeredPods)
	return f.router.Apply(p.routes, p.up)
}

func (f *routingFacility) prune(p *pass) error { return f.router.Prune(p.routes) }

func (*routingFacility) removes() string { return "routing egressd no longer wants" }
