// Package kernel is the Applier that programs the node's kernel, composed of one sub-applier per
// kernel facility (bpf, nftables, routing, addresses, BFD) as features land.
package kernel

import (
	"context"

	"github.com/egressd/egressd/dataplane"
)

// Dataplane programs the kernel of the network namespace the process runs in.
type Dataplane struct {
	// PinRoot is the bpffs directory under which every egressd bpf object is pinned.
	PinRoot string
}

// Apply makes the kernel match s. With no feature compiled in yet there is nothing to program.
func (d *Dataplane) Apply(ctx context.Context, s *dataplane.State) dataplane.Result {
	return dataplane.Result{}
}
