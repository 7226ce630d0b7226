package kernel

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/addresses"
)

// addressFacility is the egress IPs this node hosts, announced when added; those assigned
// elsewhere now are removed last, after the routes through them.
type addressFacility struct {
	*addresses.Addresses
	log *slog.Logger
}

func (*addressFacility) name() string { return "addresses" }

func (*addressFacility) section(p *pass) any { return p.state.Addresses }

func (f *addressFacility) install(p *pass) map[dataplane.Origin]error {
	return f.Apply(p.state.Addresses)
}

func (f *addressFacility) prune(p *pass) error { return f.Prune(p.state.Addresses) }

func (*addressFacility) removes() string { return "egress addresses no longer assigned here" }

// hostCIDRs are the node's own addresses as last listed (Prune lists them again when they
// changed), outside the cluster networks.
func (f *addressFacility) hostCIDRs(cluster []netip.Prefix) []netip.Prefix {
	return hostCIDRs(cluster, f.Others())
}

// maxRenewal bounds the time between renewals of the egress addresses' lifetime: an address
// of a dead agent goes between lifetime - maxRenewal and lifetime after its death, a window
// the default lifetime places just after the leader's move (see cmd/egressd's flag).
const maxRenewal = 5 * time.Second

// renewalEvery is how often renew runs for a lifetime: at least three renewals per lifetime,
// so that a missed one or two do not drop the addresses.
func renewalEvery(lifetime time.Duration) time.Duration { return min(lifetime/3, maxRenewal) }

// renew keeps the egress addresses alive while the agent runs.
func (f *addressFacility) renew() {
	if err := f.Renew(); err != nil {
		f.log.Error("renew the lifetime of egress addresses", "err", err)
	}
}
