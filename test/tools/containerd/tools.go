//go:build tools

// Package tools pins containerd and its runc shim, which test/node builds (with ociimage).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
)
