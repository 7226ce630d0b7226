package bpf

// The flags are fixed so that the objects depend on nothing of the build host but clang's major
// version (recorded in clang-major; see doc.go): only headers vendored under include/
// (-nostdinc), the little-endian BPF target, the oldest instruction set (bpf2go's default).
//go:generate go tool bpf2go -tags linux -cc clang -no-strip -cflags "-O2 -mcpu=v1 -g -Wall -Werror -nostdinc -Iinclude" -target bpfel -type fw_event -output-stem frompod FromPod src/frompod.c
