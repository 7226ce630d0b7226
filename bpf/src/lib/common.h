// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// What every part of the classifier uses: kernel and libbpf headers, tc verdicts, addresses.
#pragma once

// Only headers vendored under bpf/include (see bpf/doc.go): never the build host's.
#include <uapi.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define IPPROTO_SCTP_ IPPROTO_SCTP

struct addr {
	__u8 family; // 4 or 6
	__u8 pad[3];
	__u8 ip[16]; // IPv4 in the first 4 bytes
};
