// Package classifier programs the maps of egressd's tc classifier (bpf/src/frompod.c): local
// pods (with their routing marks), cluster networks, destinations exempt from steering,
// EgressFirewall candidate tables and ports, EgressQoS tables, and reads back its per-rule
// counters.
package classifier
