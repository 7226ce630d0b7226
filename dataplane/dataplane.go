// Package dataplane makes the kernel equal to a complete desired node state, idempotently, by
// diffing against what egressd owns (bpf maps and programs under the pin root, the nftables
// table inet egressd, routes, rules and addresses stamped with egressd's protocol). It knows
// nothing of Kubernetes: it receives plain values and returns per-object results.
package dataplane

import (
	"context"
	"net/netip"
)

// State is the complete desired state of one node. Every element remembers the API object it
// came from (Origin) so that a failure or a counter maps back to that object. Features add
// their part as they land.
type State struct {
	// LocalPods are the pods of this node whose traffic egressd classifies: the classifier is
	// attached to the host interface facing each of them.
	LocalPods []Pod
}

// Pod is a local pod and its addresses.
type Pod struct {
	Origin Origin
	IPs    []netip.Addr
}

// Origin names the API object (and rule) an element of State was compiled from.
type Origin struct {
	Kind, Namespace, Name string
	Rule                  int
}

func (o Origin) String() string {
	s := o.Kind + " " + o.Name
	if o.Namespace != "" {
		s = o.Kind + " " + o.Namespace + "/" + o.Name
	}
	return s
}

// Result says what an Apply did not manage to program, per originating object.
type Result struct {
	Failed map[Origin]error
}

// Applier programs a desired state. Implementations are safe to call repeatedly with the same
// state (level-triggered callers do).
type Applier interface {
	Apply(ctx context.Context, s *State) Result
}
