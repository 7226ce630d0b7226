#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks for the privileged tests and the demo (see
# ../shared/MACHINE.md), and mounts bpffs and tracefs. Idempotent; fast when all is present.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  echo "install-deps: not root; privileged tests will skip (run as root to install and run them)" >&2
  exit 0
fi
need=()
for c in clang:clang llc:llvm bpftool:bpftool nft:nftables ip:iproute2 tcpdump:tcpdump \
         conntrack:conntrack nc:netcat-openbsd ping:iputils-ping runc:runc \
         iptables:iptables ipset:ipset; do
  command -v "${c%%:*}" >/dev/null || need+=("${c##*:}")
done
[ -x /usr/lib/frr/bfdd ] || need+=(frr)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
# Cilium's agent compiles its programs with clang 19 (test/lab/cilium.go).
[ -x /usr/lib/llvm-19/bin/clang ] || need+=(clang-19 llvm-19)
if [ ${#need[@]} -gt 0 ]; then
  echo ">> installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    clang llvm libbpf-dev bpftool nftables iproute2 frr tcpdump conntrack netcat-openbsd iputils-ping \
    runc iptables ipset clang-19 llvm-19 >/dev/null
fi
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing || true
