//go:build tools

// Package cniplugins pins the CNI reference plugins the lab builds (test/lab/cni.go).
package cniplugins

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/ptp"
)
