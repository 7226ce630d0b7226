package reachability

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egressd/egressd/test/privileged"
)

// cpuLimit puts pid in a new cgroup limited to quota of CPU time per 100 ms period (cgroup v2
// cpu.max, else v1 cpu.cfs_quota_us); the cgroup is removed when the test ends.
func cpuLimit(t *testing.T, pid int, quota time.Duration) {
	t.Helper()
	name := fmt.Sprintf("egressd-test-%d", os.Getpid())
	var dir, parent string
	var limits [][2]string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		parent = "/sys/fs/cgroup"
		dir = filepath.Join(parent, name)
		limits = [][2]string{{"cpu.max", fmt.Sprintf("%d 100000", quota.Microseconds())}}
	} else if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err == nil {
		parent = "/sys/fs/cgroup/cpu"
		dir = filepath.Join(parent, name)
		limits = [][2]string{{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", strconv.FormatInt(quota.Microseconds(), 10)}}
	} else {
		t.Fatal("no cgroup cpu controller (v2 cpu.max or v1 cpu.cfs_quota_us) to starve the agent with")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // back to the parent first: a cgroup with a process cannot be removed
		_ = os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		if err := os.Remove(dir); err != nil {
			t.Errorf("removing cgroup: %v", err)
		}
	})
	for _, l := range append(limits, [2]string{"cgroup.procs", strconv.Itoa(pid)}) {
		if err := os.WriteFile(filepath.Join(dir, l[0]), []byte(l[1]), 0); err != nil {
			t.Fatalf("cgroup %s: %v", l[0], err)
		}
	}
}

// A CPU-saturated agent is not unreachable: the agent process spins on every CPU it may use
// and gets 1 ms of CPU per 100 ms, for 10 s. Handshakes (kernel work, in softirq) keep being
// answered; health Checks fall behind; the node stays reachable.
func TestPrivilegedSaturatedAgentStaysReachable(t *testing.T) {
	privileged.Require(t)
	cmd, addr := startChildServer(t, "burn")
	p := newProber(t, Config{healthEvery: 200 * time.Millisecond})
	p.Set(map[string]netip.AddrPort{"n": addr})
	waitFor(t, 5*time.Second, "SERVING", func() bool { return servingSeen(p) > 0 })
	cpuLimit(t, cmd.Process.Pid, time.Millisecond)
	answeredBefore, failedBefore, servedBefore := count(p, "connect", answered), count(p, "health", notServing), servingSeen(p)

	var slowest time.Duration // of handshakes the test does itself beside the prober's
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if !p.Reachable("n") {
			t.Fatalf("unreachable while the agent is starved: %v connects silent", count(p, "connect", silent))
		}
		o, rtt := connectProbe(context.Background(), addr, time.Second)
		if o != answered {
			t.Errorf("handshake with the starved agent: %v after %v", o, rtt)
		}
		slowest = max(slowest, rtt)
		time.Sleep(50 * time.Millisecond)
	}
	answers := count(p, "connect", answered) - answeredBefore
	failed, served := count(p, "health", notServing)-failedBefore, servingSeen(p)-servedBefore
	t.Logf("agent starved 10 s: %v handshakes answered (slowest of the test's own: %v), %v silent, %v refused; health: %v failed, %v SERVING",
		answers, slowest,
		count(p, "connect", silent), count(p, "connect", refused), failed, served)
	if answers < 30 || count(p, "connect", silent) != 0 || count(p, "connect", refused) != 0 {
		t.Errorf("handshakes with the agent starved: %v answered (want about 66), %v silent, %v refused (want 0)",
			answers, count(p, "connect", silent), count(p, "connect", refused))
	}
	if failed == 0 {
		t.Errorf("no health Check failed while the agent was starved (%v SERVING): the test did not starve it", served)
	}
}

// A CPU-starved leader does not fail nodes over: the prober's process spins on every CPU it may
// use and gets 10 ms of CPU per 100 ms, for 10 s, probing a healthy agent. It wakes late from
// its timeouts, but handshakes its kernel completed meanwhile count as answers.
func TestPrivilegedStarvedLeaderKeepsNodesReachable(t *testing.T) {
	privileged.Require(t)
	s := startServer(t, "127.0.0.1:0")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=probe "+s.Addr().String())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cpuLimit(t, cmd.Process.Pid, 10*time.Millisecond)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("leader: %v: %s", err, out.String())
	}
	var answers, silents, refusals, unreachable float64
	if _, err := fmt.Sscan(out.String(), &answers, &silents, &refusals, &unreachable); err != nil {
		t.Fatalf("leader said %q: %v", out.String(), err)
	}
	t.Logf("starved leader, 10 s: %v handshakes answered, %v silent, %v refused; %v unreachable verdicts",
		answers, silents, refusals, unreachable)
	if silents != 0 || refusals != 0 || unreachable != 0 || answers < 20 {
		t.Errorf("want only answers (about 66, at least 20) and no unreachable verdict")
	}
}

// probeChild is the "probe <addr>" child of TestMain (see envChild), the leader that
// TestPrivilegedStarvedLeaderKeepsNodesReachable starves: it probes target for 10 s while it
// keeps every CPU busy, then prints what it saw.
func probeChild(target netip.AddrPort) {
	p := NewProber(Config{})
	p.Set(map[string]netip.AddrPort{"n": target})
	time.Sleep(10 * time.Second)
	p.Stop()
	fmt.Println(count(p, "connect", answered), count(p, "connect", silent), count(p, "connect", refused),
		testutil.ToFloat64(p.metrics.unreachable.WithLabelValues(string(hostSilent)))+
			testutil.ToFloat64(p.metrics.unreachable.WithLabelValues(string(agentAbsent))))
}
