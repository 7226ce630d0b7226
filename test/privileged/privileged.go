// Package privileged guards tests that need root (netns, bpf, nftables). Such tests are named
// TestPrivileged... so that they are recognisable; they skip with a clear message when not root,
// except under EGRESSD_REQUIRE_PRIVILEGED=1 (CI), where not being able to run them is a failure.
package privileged

import (
	"os"
	"strings"
	"testing"
)

// EnvRequire makes a privileged test that cannot run fail instead of skip.
const EnvRequire = "EGRESSD_REQUIRE_PRIVILEGED"

// Require must be called first by every privileged test.
func Require(t testing.TB) {
	t.Helper()
	if name := t.Name(); !strings.HasPrefix(name, "TestPrivileged") && !strings.HasPrefix(name, "BenchmarkPrivileged") {
		t.Fatalf("%s needs root: name it TestPrivileged... (or BenchmarkPrivileged...)", name)
	}
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s=1 but not running as root: privileged tests cannot run", EnvRequire)
	}
	t.Skip("needs root (network namespaces, bpf, nftables): run make test as root")
}
