package controlplane

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FreePorts returns n TCP ports that were free on loopback a moment ago, for processes to
// listen on. They are taken below the kernel's ephemeral range (ip_local_port_range): a port
// the kernel handed out for :0 could be handed out again, as the local port of any outgoing
// connection on the machine, before the process bound it (a controller failed so in CI with
// "address already in use"). Below that range only explicit binds compete: other labs, which
// start at a random port of the range and probe.
func FreePorts(n int) ([]int, error) {
	lo, hi := portRange()
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	handedOut.Lock()
	defer handedOut.Unlock()
	first := rand.IntN(hi - lo)
	for i := 0; i < hi-lo && len(ports) < n; i++ {
		p := lo + (first+i)%(hi-lo)
		if at, ok := handedOut.at[p]; ok && time.Since(at) < time.Minute {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, p)
		handedOut.at[p] = time.Now()
	}
	if len(ports) < n {
		return nil, fmt.Errorf("no %d free TCP ports on loopback in %d-%d", n, lo, hi-1)
	}
	return ports, nil
}

// handedOut is when FreePorts last returned each port in this process: free a moment ago,
// it stays so only until the process it was for binds it.
var handedOut = struct {
	sync.Mutex
	at map[int]time.Time
}{at: map[int]time.Time{}}

// portRange is [lo, hi): the 12,000 ports below the ephemeral range, or above 10000 when
// that range starts lower.
func portRange() (lo, hi int) {
	hi = 32768 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				hi = v
			}
		}
	}
	return max(10000, hi-12000), max(hi, 10000+12000)
}
