//go:build tools

// Package kwok pins kwok, the controller that plays the scale harness's fake nodes and pods
// (test/scale).
package kwok

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
