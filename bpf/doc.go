// Package bpf holds egressd's eBPF programs: the C sources (src/: a small main per attach
// point, src/lib/*.h by concern) and their bpf2go output (frompod_bpfel.o and the Go bindings
// frompod_bpfel.go), committed so that building egressd needs no clang.
//
// # Reproducible objects
//
// The objects depend on the build host's clang only, never on its headers: they include only
// what is vendored under include/ (-nostdinc): include/uapi.h, the handful of Linux uapi
// definitions the programs use, copied from the kernel (ABI, so they cannot go stale), and
// include/bpf/, libbpf's bpf_helpers.h, bpf_helper_defs.h and bpf_endian.h (libbpf 1.1.2, as
// Debian 12's libbpf-dev ships them). The target (bpfel), the instruction set (-mcpu=v1) and
// every flag are fixed in gen.go; bpf2go strips the compiler's identity and the source paths.
// What remains is the compiler itself: two clang majors emit different instructions for the
// same source. So clang-major records the major version of the clang that built the committed
// objects (make generate writes it).
//
// # make verify-generate
//
//   - Host clang major = clang-major: the objects are rebuilt and compared byte for byte with
//     the commit (with the rest of the generated code). This is the only full check; CI runs
//     it with that clang (BPF_VERIFY_STRICT=1 makes anything less a failure there).
//   - Another major: it says so in a banner and does not claim more than it checks: it rebuilds
//     into a scratch copy and requires the Go bindings (types, map, program and variable names)
//     to be identical to the committed ones, and the maps, programs and variables the objects
//     declare to their loader (types, key and value sizes and types, sizes, flags, pinning,
//     sections, initial values: internal/specdiff) to be identical; the committed objects stay.
//     A change to the C that moves none of these (an instruction) is not caught there. Install
//     the recorded major and pass CLANG=clang-N to compare every byte.
//
// To change a program: edit src/, run make generate (it rebuilds with the host's clang and
// records its major), commit the .o, .go and clang-major together.
package bpf
