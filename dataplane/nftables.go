package dataplane

import "net/netip"

// NftablesState is what the table inet egressd holds.
type NftablesState struct {
	// BackendDenies are what EgressFirewall denies of local pods' traffic to Service backends
	// outside the cluster networks. The classifier runs before DNAT and sees only the service
	// address (exempt as a cluster network), so these are judged after DNAT by the backend.
	BackendDenies []BackendDeny
	// KeepBackendDenies are the namespaces whose EgressFirewall failed to compile: their
	// elements stay as they were (fail closed).
	KeepBackendDenies []string
}

// BackendDeny drops what a local pod sends, through a Service's DNAT, to one backend address,
// protocol and port.
type BackendDeny struct {
	Origin   Origin // the EgressFirewall; Rule is the index of the rule that denies
	Pod      netip.Addr
	Backend  netip.Addr
	Protocol uint8
	Port     uint16
}
