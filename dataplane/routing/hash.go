package routing

import (
	"fmt"
	"os"
	"strings"
)

// hashPolicies are the sysctls choosing what the kernel hashes to pick a multipath member:
// 0 (the default) hashes addresses only, so every flow of a pod to one destination takes the
// same gateway; 1 hashes the 5-tuple, spreading flows as upstream's ECMP does.
var hashPolicies = []string{"/proc/sys/net/ipv4/fib_multipath_hash_policy", "/proc/sys/net/ipv6/fib_multipath_hash_policy"}

// EnsureFlowHash makes multipath routes of the current network namespace spread per flow
// (5-tuple hash) when they hash addresses only; a policy an operator chose otherwise (2, 3) is
// left alone. It reports the sysctls it changed.
func EnsureFlowHash() ([]string, error) {
	var changed []string
	for _, p := range hashPolicies {
		b, err := os.ReadFile(p)
		if err != nil {
			return changed, fmt.Errorf("read %s: %w", p, err)
		}
		if strings.TrimSpace(string(b)) != "0" {
			continue
		}
		if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
			return changed, fmt.Errorf("set %s to 1: %w", p, err)
		}
		changed = append(changed, p)
	}
	return changed, nil
}
