package bpf

//go:generate go tool bpf2go -tags linux -cc clang -no-strip -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type fw_event -output-stem frompod FromPod src/frompod.c
