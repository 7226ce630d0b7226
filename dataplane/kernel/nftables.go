package kernel

import (
	"log/slog"
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/nft"
)

// nftFacility is egressd's nftables table: leak guards, SNAT, after-DNAT drops, DSCP, the
// external gateways' return paths; it removes what the state no longer wants in the same
// transaction as its adds.
type nftFacility struct {
	table *nft.Table
	// gatewayMACs are the return paths' gateways with the MAC last given to nftables ("" for
	// none): a neighbour update that changes one triggers a sync (neighbourChanged).
	gatewayMACs map[netip.Addr]string
	mu          sync.Mutex // the events' goroutine reads gatewayMACs
	tableLost   prometheus.Counter
	ask         func()
	log         *slog.Logger
}

func (*nftFacility) name() string { return "nftables" }

// section is the state's nftables section with the return paths as they would be written:
// those of live gateways whose MAC is known.
func (f *nftFacility) section(p *pass) any {
	s := p.state.Nftables
	s.ReturnPaths = f.returnPaths(p.state.Nftables.ReturnPaths, p.up)
	p.nftables = &s
	return s
}

func (f *nftFacility) install(p *pass) map[dataplane.Origin]error {
	if p.nftables == nil {
		f.section(p)
	}
	return f.table.Apply(p.nftables)
}

// checkTable asks for a sync, which writes egressd's nftables table again, when it is not
// whole: a `nft flush ruleset` or `nft delete table` elsewhere takes egressd's SNAT and leak
// guards with it. Polled, not watched: a listener of nftables' events makes the kernel report
// every element egressd writes.
func (f *nftFacility) checkTable() {
	if !f.table.Intact() {
		f.tableLost.Inc()
		f.log.Warn("egressd's nftables table was deleted or changed behind its back; writing it again", "table", "inet "+nft.TableName)
		f.ask()
	}
}
