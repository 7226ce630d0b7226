package reachability

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/egressd/egressd/test/poll"
)

// envChild makes the test binary a bare agent or leader, in a process of its own that the
// saturation tests stop or starve:
//   - "serve": a Server on 127.0.0.1, a free port; prints its address, waits to be killed;
//   - "burn": the same, and it keeps every CPU it may use busy;
//   - "probe <addr>": a Prober of addr while it keeps every CPU busy; after 10 s it prints
//     "<answered> <silent> <refused> <unreachable verdicts>" and exits.
const envChild = "EGRESSD_REACHABILITY_CHILD"

func TestMain(m *testing.M) {
	mode := os.Getenv(envChild)
	if mode == "" {
		os.Exit(m.Run())
	}
	if mode != "serve" {
		for range 2 * runtime.GOMAXPROCS(0) {
			go func() {
				for {
				}
			}()
		}
	}
	if target, ok := strings.CutPrefix(mode, "probe "); ok {
		probeChild(netip.MustParseAddrPort(target)) // starved_privileged_test.go
		os.Exit(0)
	}
	s := NewServer("127.0.0.1:0")
	if err := s.Start(); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(s.Addr())
	select {}
}

// startChild runs the test binary as a bare agent or leader (see envChild) and returns the
// process and the first line it printed; the process is killed when the test ends.
func startChild(t *testing.T, mode string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+mode)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return cmd, strings.TrimSpace(line)
}

// startChildServer is startChild for the server modes.
func startChildServer(t *testing.T, mode string) (*exec.Cmd, netip.AddrPort) {
	t.Helper()
	cmd, line := startChild(t, mode)
	addr, err := netip.ParseAddrPort(line)
	if err != nil {
		t.Fatalf("child server said %q: %v", line, err)
	}
	return cmd, addr
}

// waitFor polls cond (test/poll) until it holds, failing the test if d passes first: for tests
// over real sockets, which synctest's fake clock cannot drive.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Eventually(t, what, d, func() error {
		if !cond() {
			return errors.New("not yet")
		}
		return nil
	})
}

func startServer(t *testing.T, addr string) *Server {
	t.Helper()
	s := NewServer(addr)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func count(p *Prober, kind string, o outcome) float64 {
	return testutil.ToFloat64(p.metrics.probes.WithLabelValues(kind, o.String()))
}

// The Server answers SERVING for Service_Egress_IP, as upstream's does, and nothing else.
func TestServerServesEgressIPService(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	conn, err := grpc.NewClient("passthrough:///"+s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := healthpb.NewHealthClient(conn)
	resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "Service_Egress_IP"})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check(Service_Egress_IP) = %v, %v; want SERVING", resp, err)
	}
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "other"}); status.Code(err) != codes.NotFound {
		t.Errorf("Check(other): %v, want NotFound", err)
	}
	if err := s.Start(); err == nil {
		t.Error("second Start succeeded")
	}
}

// Real sockets on loopback: handshakes and SERVING are seen with the production dialer.
func TestLoopbackServingSeen(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	p := newProber(t, Config{healthEvery: 100 * time.Millisecond})
	p.Set(map[string]netip.AddrPort{"n": s.Addr()})
	waitFor(t, 3*time.Second, "SERVING and handshakes", func() bool {
		return servingSeen(p) >= 2 && count(p, "connect", answered) >= 2
	})
	if !p.Reachable("n") {
		t.Error("not reachable")
	}
	if n := testutil.CollectAndCount(p.metrics.rtt); n != 2 {
		t.Errorf("%d RTT series, want connect and health", n)
	}
}

// An agent restart (listener closed: RST) shorter than the grace never makes the node
// unreachable; an absence longer than the grace does, and SERVING brings it back. Over real
// sockets: what the kernel answers for a closed port, and the gRPC connection's reconnection
// (the timing alone, on a fake clock: TestProberRestartWithinGrace, TestProberRefusedUntilGrace).
func TestLoopbackAgentRestart(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	addr := s.Addr()
	p := newProber(t, Config{Grace: 2 * time.Second, healthEvery: 100 * time.Millisecond})
	p.Set(map[string]netip.AddrPort{"n": addr})
	waitFor(t, 3*time.Second, "SERVING", func() bool { return servingSeen(p) > 0 })

	s.Stop()
	// The restart lasts until the stopped agent's port refused 5 connects (about 750 ms at the
	// 150 ms interval): within the 2 s grace.
	waitFor(t, 3*time.Second, "5 refused connects while stopped", func() bool { return count(p, "connect", refused) >= 5 })
	s = startServer(t, addr.String())
	served := servingSeen(p)
	waitFor(t, 3*time.Second, "SERVING after the restart", func() bool { return servingSeen(p) > served })
	select {
	case <-p.Changed():
		t.Fatal("reachability changed during a restart shorter than the grace")
	default:
	}
	if count(p, "connect", silent) != 0 {
		t.Errorf("connects while stopped: %v refused, %v silent (want 0)",
			count(p, "connect", refused), count(p, "connect", silent))
	}

	stopAt := time.Now()
	s.Stop()
	waitFor(t, 4*time.Second, "unreachable past the grace", func() bool { return !p.Reachable("n") })
	if took := time.Since(stopAt); took < 1900*time.Millisecond {
		t.Errorf("unreachable %v after the agent stopped, before the 2 s grace", took)
	}
	startServer(t, addr.String())
	waitFor(t, 3*time.Second, "reachable once serving again", func() bool { return p.Reachable("n") })
}

// A saturated agent is not unreachable: its process is stopped (SIGSTOP, the limit of a
// saturated CPU: no cycles at all) until the prober has had 30 handshakes answered and 5
// health Checks fail (about 5 s). Handshakes are the kernel's work and go on being answered;
// health Checks time out; the node stays reachable within the 30 s grace.
func TestLoopbackStoppedAgentStaysReachable(t *testing.T) {
	cmd, addr := startChildServer(t, "serve")
	p := newProber(t, Config{healthEvery: 200 * time.Millisecond})
	p.Set(map[string]netip.AddrPort{"n": addr})
	waitFor(t, 3*time.Second, "SERVING", func() bool { return servingSeen(p) > 0 })
	answeredBefore, failedBefore := count(p, "connect", answered), count(p, "health", notServing)

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	served := servingSeen(p)
	// Until enough was seen (or 20 s passed), failing at the first change of reachability.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for count(p, "connect", answered)-answeredBefore < 30 || count(p, "health", notServing)-failedBefore < 5 {
		select {
		case <-p.Changed():
			t.Fatalf("reachability changed while the agent is stopped: reachable %v, %v connects silent",
				p.Reachable("n"), count(p, "connect", silent))
		case <-deadline:
			t.Fatalf("after 20 s stopped: %v handshakes answered (want 30), %v health Checks failed (want 5): the test did not starve it",
				count(p, "connect", answered)-answeredBefore, count(p, "health", notServing)-failedBefore)
		case <-tick.C:
		}
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	answers, failed := count(p, "connect", answered)-answeredBefore, count(p, "health", notServing)-failedBefore
	t.Logf("agent stopped %v: %v handshakes answered, %v silent, %v refused; %v health Checks failed, %v SERVING",
		time.Since(stopped).Round(time.Millisecond), answers, count(p, "connect", silent), count(p, "connect", refused), failed, servingSeen(p)-served)
	if !p.Reachable("n") || count(p, "connect", silent) != 0 || count(p, "connect", refused) != 0 {
		t.Errorf("agent stopped: reachable %v, %v handshakes silent, %v refused (want true, 0, 0)",
			p.Reachable("n"), count(p, "connect", silent), count(p, "connect", refused))
	}
	waitFor(t, 5*time.Second, "SERVING after SIGCONT", func() bool { return servingSeen(p) > served+1 })
}

// The production probe on real sockets, both families: a listener answers (the kernel does the
// handshake: nothing accepts here), a closed port refuses, a cancelled probe says nothing.
func TestConnectProbeOutcomes(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "[::1]"} {
		l, err := net.Listen("tcp", host+":0")
		if err != nil {
			t.Fatal(err)
		}
		open := l.Addr().(*net.TCPAddr).AddrPort()
		closed, err := net.Listen("tcp", host+":0")
		if err != nil {
			t.Fatal(err)
		}
		shut := closed.Addr().(*net.TCPAddr).AddrPort()
		_ = closed.Close()
		if o, rtt := connectProbe(context.Background(), open, time.Second); o != answered || rtt <= 0 || rtt > 100*time.Millisecond {
			t.Errorf("%s listening: %v in %v, want answered in a positive RTT", open, o, rtt)
		}
		if o, _ := connectProbe(context.Background(), shut, time.Second); o != refused {
			t.Errorf("%s closed: %v, want refused", shut, o)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if o, _ := connectProbe(ctx, open, time.Second); o != localError {
			t.Errorf("%s with a cancelled context: %v, want %v", open, o, localError)
		}
		_ = l.Close()
	}
}
