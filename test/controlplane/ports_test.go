package controlplane

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestFreePortsBelowTheEphemeralRange: the ports are distinct, free to bind, never handed out
// twice in a row, and below the range the kernel picks outgoing connections' ports from.
func TestFreePortsBelowTheEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatal(err)
	}
	ephemeral, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil {
		t.Fatal(err)
	}
	first, err := FreePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	second, err := FreePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range append(first, second...) {
		if seen[p] {
			t.Errorf("port %d handed out twice: %v, then %v", p, first, second)
		}
		seen[p] = true
		if ephemeral > 22000 && p >= ephemeral {
			t.Errorf("port %d is in the ephemeral range, from %d", p, ephemeral)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Errorf("port %d: %v", p, err)
			continue
		}
		l.Close()
	}
}
