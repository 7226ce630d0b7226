// Package classifier programs the maps of egressd's tc classifier (bpf/src/frompod.c): local
// pods, cluster networks, EgressFirewall candidate tables and ports, EgressQoS tables, and reads
// back its per-rule counters.
package classifier
