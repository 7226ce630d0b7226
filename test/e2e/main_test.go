// Package e2e runs egressd as real processes against the real control plane.
package e2e

import (
	"testing"

	"github.com/egressd/egressd/test/controlplane"
)

func TestMain(m *testing.M) { controlplane.Main(m) }
