//go:build tools

// Package cilium pins Cilium's agent and CNI plugin, the pod networking of the lab's Cilium
// nodes (test/lab).
package cilium

import (
	_ "github.com/cilium/cilium/daemon"
	_ "github.com/cilium/cilium/plugins/cilium-cni"
)
