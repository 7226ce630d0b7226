package kernel

import (
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/tunnel"
)

// tunnelFacility is egressd's VXLAN device and its entries per egress node, before the routes
// through it; entries no longer wanted (or the device) go after the routes.
type tunnelFacility struct{ *tunnel.Tunnel }

func (tunnelFacility) name() string { return "tunnel" }

func (tunnelFacility) section(p *pass) any { return p.state.Tunnel }

func (f tunnelFacility) install(p *pass) map[dataplane.Origin]error {
	return f.Apply(&p.state.Tunnel)
}

func (f tunnelFacility) prune(p *pass) error { return f.Prune(&p.state.Tunnel) }

func (tunnelFacility) removes() string { return "tunnel entries egressd no longer wants" }
