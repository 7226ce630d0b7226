package reachability

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// netMode is how fakeNet treats dials to one address.
type netMode int

const (
	forward   netMode = iota // to the real server: handshakes and SERVING
	refuse                   // ECONNREFUSED, as a host whose agent is not listening
	blackhole                // no answer until the dial's deadline, as a dead host
	hang                     // no return at all until release, deadline or not: a stuck dial
)

// fakeNet is an injected dialer: the addresses it is given are never dialled; each one is
// forwarded to a real loopback Server, refused, or blackholed, as the test says. Leaving
// forward mode cuts the forwarded connections, as an agent restart does (a real dead host
// stalls them instead: the privileged link-down test has that).
type fakeNet struct {
	to netip.AddrPort

	mu    sync.Mutex
	modes map[netip.AddrPort]netMode
	dials map[netip.AddrPort]int
	conns map[netip.AddrPort][]net.Conn

	released chan struct{} // ends hung dials
}

func newFakeNet(t *testing.T) *fakeNet {
	s := NewServer("127.0.0.1:0")
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return &fakeNet{to: s.Addr(), modes: map[netip.AddrPort]netMode{}, dials: map[netip.AddrPort]int{},
		conns: map[netip.AddrPort][]net.Conn{}, released: make(chan struct{})}
}

func (f *fakeNet) set(addr netip.AddrPort, m netMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.modes[addr] = m
	if m != forward {
		for _, c := range f.conns[addr] {
			_ = c.Close()
		}
		delete(f.conns, addr)
	}
}

func (f *fakeNet) count(addr netip.AddrPort) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dials[addr]
}

func (f *fakeNet) dial(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	f.mu.Lock()
	m := f.modes[addr]
	f.dials[addr]++
	f.mu.Unlock()
	switch m {
	case refuse:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	case blackhole:
		<-ctx.Done()
		return nil, ctx.Err()
	case hang:
		<-f.released
		return nil, context.Canceled
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", f.to.String())
	if err == nil {
		f.mu.Lock()
		f.conns[addr] = append(f.conns[addr], c)
		f.mu.Unlock()
	}
	return c, err
}

// probe is a layer-1 probe through the fake network; a forwarded one is the production probe
// of the real server, so that a loaded test machine does not make misses out of late wake-ups.
func (f *fakeNet) probe(ctx context.Context, addr netip.AddrPort, timeout time.Duration) (outcome, time.Duration) {
	f.mu.Lock()
	m := f.modes[addr]
	f.dials[addr]++
	f.mu.Unlock()
	switch m {
	case refuse:
		return refused, time.Millisecond
	case blackhole:
		select {
		case <-ctx.Done():
			return localError, timeout
		case <-time.After(timeout):
			return silent, timeout
		}
	case hang:
		<-f.released
		return localError, 0
	}
	return connectProbe(ctx, f.to, timeout)
}

// fast are timings for fake-network tests: detection in 150-200 ms, grace 1 s.
func fast(f *fakeNet) Config {
	return Config{Interval: 50 * time.Millisecond, Misses: 3, Grace: time.Second,
		healthEvery: 50 * time.Millisecond, probe: f.probe, dial: f.dial}
}

// newProber returns a Prober that is stopped when the test ends.
func newProber(t testing.TB, cfg Config) *Prober {
	p := NewProber(cfg)
	t.Cleanup(func() { stopWithin(t, p) })
	return p
}

// stopWithin stops p, failing the test (instead of hanging it) if goroutines do not end.
func stopWithin(t testing.TB, p *Prober) {
	done := make(chan struct{})
	go func() { p.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("Stop did not return within 5 s: probe goroutines do not end")
	}
}

// waitFor polls cond every 5 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func servingSeen(p *Prober) float64 {
	return testutil.ToFloat64(p.metrics.probes.WithLabelValues("health", "serving"))
}

var (
	addrA = netip.MustParseAddrPort("192.0.2.1:9107")
	addrB = netip.MustParseAddrPort("192.0.2.2:9107")
	addrC = netip.MustParseAddrPort("192.0.2.3:9107")
)

// A blackholed target is unreachable within Misses intervals, while the target beside it keeps
// being probed at its own rate and stays reachable, even beside a third whose dials never end.
func TestProberSilentTargetDoesNotBlockOthers(t *testing.T) {
	f := newFakeNet(t)
	p := newProber(t, fast(f))
	defer close(f.released) // before the prober's cleanup stops it
	f.set(addrB, blackhole)
	f.set(addrC, hang)
	start := time.Now()
	p.Set(map[string]netip.AddrPort{"a": addrA, "b": addrB, "c": addrC})
	select {
	case <-p.Changed():
	case <-time.After(2 * time.Second):
		t.Fatal("no change signalled")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("blackholed target unreachable after %v, want about 3 x 50 ms", took)
	}
	if p.Reachable("b") || !p.Reachable("a") {
		t.Fatalf("reachable a=%v b=%v, want true false", p.Reachable("a"), p.Reachable("b"))
	}
	before := f.count(addrA)
	time.Sleep(500 * time.Millisecond)
	// 10 probes in 500 ms when nothing waits on b's and c's blocked ones (Checks reuse one
	// connection: they do not dial).
	if n := f.count(addrA) - before; n < 6 {
		t.Errorf("a was probed %d times in 500 ms beside a blackholed b and a hung c, want about 10", n)
	}
	if !p.Reachable("a") || servingSeen(p) == 0 {
		t.Errorf("a reachable=%v, SERVING seen %v times", p.Reachable("a"), servingSeen(p))
	}
	if got := testutil.ToFloat64(p.metrics.unreachable.WithLabelValues(string(hostSilent))); got != 1 {
		t.Errorf("unreachable{reason=host_silent} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(p.metrics.reachable.WithLabelValues("b")); got != 0 {
		t.Errorf("node_reachable{node=b} = %v, want 0", got)
	}
}

// Refused connects (agent restarting) keep a node reachable for the grace period; past it the
// node is unreachable (agent_absent), and it comes back when the agent serves again.
func TestProberRefusedUntilGrace(t *testing.T) {
	f := newFakeNet(t)
	p := newProber(t, fast(f))
	p.Set(map[string]netip.AddrPort{"a": addrA})
	waitFor(t, 2*time.Second, "SERVING seen", func() bool { return servingSeen(p) > 0 })
	f.set(addrA, refuse)
	down := time.Now()
	time.Sleep(700 * time.Millisecond) // Grace is 1 s
	if !p.Reachable("a") {
		t.Fatalf("unreachable after %v of refused connects, grace is 1 s", time.Since(down))
	}
	waitFor(t, 2*time.Second, "unreachable past the grace", func() bool { return !p.Reachable("a") })
	// The grace runs from the last SERVING, at most one Check period (50 ms) before down.
	if took := time.Since(down); took < 950*time.Millisecond {
		t.Errorf("unreachable %v after the agent went away, before the 1 s grace", took)
	}
	if got := testutil.ToFloat64(p.metrics.unreachable.WithLabelValues(string(agentAbsent))); got != 1 {
		t.Errorf("unreachable{reason=agent_absent} = %v, want 1", got)
	}
	f.set(addrA, forward)
	waitFor(t, 3*time.Second, "reachable once serving again", func() bool { return p.Reachable("a") })
}

// Set is level-triggered: removed nodes are unknown (false), new ones start reachable, and a
// changed address starts the node over.
func TestProberSet(t *testing.T) {
	f := newFakeNet(t)
	p := newProber(t, fast(f))
	f.set(addrB, blackhole)
	p.Set(map[string]netip.AddrPort{"a": addrA})
	p.Set(map[string]netip.AddrPort{"a": addrA, "b": addrB})
	if !p.Reachable("a") || !p.Reachable("b") {
		t.Fatal("new targets start reachable")
	}
	waitFor(t, 2*time.Second, "b unreachable", func() bool { return !p.Reachable("b") })
	p.Set(map[string]netip.AddrPort{"b": addrA}) // b moves to an address that answers
	if p.Reachable("a") {
		t.Error("a removed but still reachable")
	}
	if !p.Reachable("b") {
		t.Error("b with a new address does not start over")
	}
	if p.Reachable("nobody") {
		t.Error("an unknown node is reachable")
	}
	if n := testutil.CollectAndCount(p.metrics.reachable); n != 1 {
		t.Errorf("%d node_reachable series, want 1 (b)", n)
	}
}

// Changed coalesces: several transitions leave one pending signal.
func TestProberChangedCoalesces(t *testing.T) {
	f := newFakeNet(t)
	p := newProber(t, fast(f))
	f.set(addrA, blackhole)
	f.set(addrB, blackhole)
	p.Set(map[string]netip.AddrPort{"a": addrA, "b": addrB})
	waitFor(t, 2*time.Second, "both unreachable", func() bool { return !p.Reachable("a") && !p.Reachable("b") })
	if n := len(p.Changed()); n != 1 {
		t.Errorf("%d pending change signals after two transitions, want 1", n)
	}
}

// Removing targets ends their goroutines (and the gRPC connections' ones); Stop ends the rest.
func TestProberNoGoroutineLeak(t *testing.T) {
	f := newFakeNet(t)
	base := runtime.NumGoroutine()
	p := newProber(t, fast(f))
	targets := map[string]netip.AddrPort{}
	for i := range 12 {
		a := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)}), 9107)
		f.set(a, netMode(i%3))
		targets[a.String()] = a
	}
	p.Set(targets)
	waitFor(t, 2*time.Second, "probes running", func() bool { return servingSeen(p) >= 4 })
	if n := runtime.NumGoroutine(); n < base+24 {
		t.Fatalf("%d goroutines with 12 targets, base %d: want 2 per target at least", n, base)
	}
	p.Set(nil)
	waitGoroutines(t, base)
	p.Set(targets)
	waitFor(t, 2*time.Second, "probes running again", func() bool { return servingSeen(p) >= 8 })
	stopWithin(t, p)
	waitGoroutines(t, base)
	p.Set(targets) // after Stop: nothing starts
	if n := runtime.NumGoroutine(); n > base {
		t.Errorf("Set after Stop started goroutines: %d, base %d", n, base)
	}
}

func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			var b bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Fatalf("%d goroutines left, base %d:\n%s", runtime.NumGoroutine(), base, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
