//go:build tools

// Package flannel pins flanneld, the overlay of the lab's flannel nodes (test/lab).
package flannel

import (
	_ "github.com/flannel-io/flannel"
)
