// Package bpf holds egressd's eBPF programs: the C sources and their bpf2go output (the .o
// objects and Go bindings are committed; the C sources are in src/, so that building egressd needs no clang; make
// generate rebuilds them and CI fails if they are stale).
package bpf
