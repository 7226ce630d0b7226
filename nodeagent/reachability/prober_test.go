package reachability

import (
	"bytes"
	"context"
	"net/netip"
	"runtime"
	"runtime/pprof"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// netMode is how fakeNet treats one address.
type netMode int

const (
	forward   netMode = iota // an agent serving: handshakes answered, Checks SERVING
	refuse                   // ECONNREFUSED, as a host whose agent is not listening
	blackhole                // no answer until the deadline, as a dead host
	hang                     // no return at all until release, deadline or not: a stuck dial
)

// fakeNet is an injected network for both layers, with no socket at all, so that the Prober's
// timing runs on a synctest bubble's fake clock: each address is served, refused, blackholed
// or hung, as the test says. (Real sockets: loopback_test.go, and the privileged tests.)
type fakeNet struct {
	mu     sync.Mutex
	modes  map[netip.AddrPort]netMode
	probes map[netip.AddrPort]int // layer-1 probes
	open   int                    // layer-2 connections not closed

	released chan struct{} // ends hung probes and Checks
}

// newFakeNet returns a fakeNet; in a bubble, since its channel belongs to the bubble it is made in.
func newFakeNet() *fakeNet {
	return &fakeNet{modes: map[netip.AddrPort]netMode{}, probes: map[netip.AddrPort]int{}, released: make(chan struct{})}
}

func (f *fakeNet) set(addr netip.AddrPort, m netMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.modes[addr] = m
}

func (f *fakeNet) mode(addr netip.AddrPort) netMode {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.modes[addr]
}

func (f *fakeNet) count(addr netip.AddrPort) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probes[addr]
}

func (f *fakeNet) openConns() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open
}

// probe is a layer-1 probe through the fake network.
func (f *fakeNet) probe(ctx context.Context, addr netip.AddrPort, timeout time.Duration) (outcome, time.Duration) {
	f.mu.Lock()
	m := f.modes[addr]
	f.probes[addr]++
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
	return answered, time.Millisecond
}

// health opens a fake layer-2 connection (in place of grpcHealth): each Check answers as the
// address's mode says at that moment, so leaving forward mode is an agent going away.
func (f *fakeNet) health(_ dialFunc, addr netip.AddrPort, _ time.Duration) (healthChecker, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.open++
	return &fakeHealth{f: f, addr: addr}, nil
}

type fakeHealth struct {
	f      *fakeNet
	addr   netip.AddrPort
	closed bool
}

func (h *fakeHealth) check(ctx context.Context, timeout time.Duration) (outcome, time.Duration) {
	switch h.f.mode(h.addr) {
	case refuse: // the connection fails at once
		return notServing, time.Millisecond
	case blackhole: // until the Check's deadline
		select {
		case <-ctx.Done():
		case <-time.After(timeout):
		}
		return notServing, timeout
	case hang:
		<-h.f.released
		return notServing, 0
	}
	return serving, time.Millisecond
}

func (h *fakeHealth) close() {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	if !h.closed {
		h.closed = true
		h.f.open--
	}
}

// fast are timings for fake-network tests: detection in 3 x 50 ms, grace 1 s.
func fast(f *fakeNet) Config {
	return Config{Interval: 50 * time.Millisecond, Misses: 3, Grace: time.Second,
		healthEvery: 50 * time.Millisecond, probe: f.probe, health: f.health}
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

// advance, in a synctest bubble, moves the fake clock by d (at once) and returns when every
// goroutine of the bubble is durably blocked again: every probe and Check due by then has
// been made and recorded, and nothing more happens until the clock moves again.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func servingSeen(p *Prober) float64 {
	return testutil.ToFloat64(p.metrics.probes.WithLabelValues("health", "serving"))
}

var (
	addrA = netip.MustParseAddrPort("192.0.2.1:9107")
	addrB = netip.MustParseAddrPort("192.0.2.2:9107")
	addrC = netip.MustParseAddrPort("192.0.2.3:9107")
)

// A blackholed target is unreachable after Misses intervals, while the target beside it keeps
// being probed at its own rate and stays reachable, even beside a third whose probes and
// Checks never end. On the bubble's fake clock: the rate is exact.
func TestProberSilentTargetDoesNotBlockOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeNet()
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
		if took := time.Since(start); took != 3*50*time.Millisecond {
			t.Errorf("blackholed target unreachable after %v, want 3 x 50 ms", took)
		}
		if p.Reachable("b") || !p.Reachable("a") {
			t.Fatalf("reachable a=%v b=%v, want true false", p.Reachable("a"), p.Reachable("b"))
		}
		synctest.Wait()
		before := f.count(addrA)
		advance(500 * time.Millisecond)
		// 10 probes in 500 ms: nothing waits on b's and c's blocked ones.
		if n := f.count(addrA) - before; n != 10 {
			t.Errorf("a was probed %d times in 500 ms beside a blackholed b and a hung c, want 10", n)
		}
		if !p.Reachable("a") || servingSeen(p) < 10 {
			t.Errorf("a reachable=%v, SERVING seen %v times, want 10 at least", p.Reachable("a"), servingSeen(p))
		}
		if got := testutil.ToFloat64(p.metrics.unreachable.WithLabelValues(string(hostSilent))); got != 1 {
			t.Errorf("unreachable{reason=host_silent} = %v, want 1", got)
		}
		if got := testutil.ToFloat64(p.metrics.reachable.WithLabelValues("b")); got != 0 {
			t.Errorf("node_reachable{node=b} = %v, want 0", got)
		}
	})
}

// Refused connects (agent restarting) keep a node reachable for the grace period; past it the
// node is unreachable (agent_absent), and it comes back when the agent serves again. On the
// bubble's fake clock: reachable a whole grace after the last SERVING, unreachable at the next
// Check.
func TestProberRefusedUntilGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeNet()
		p := newProber(t, fast(f))
		p.Set(map[string]netip.AddrPort{"a": addrA})
		advance(0)
		if servingSeen(p) == 0 {
			t.Fatal("no SERVING seen")
		}
		f.set(addrA, refuse) // right after that SERVING
		advance(time.Second)
		if !p.Reachable("a") {
			t.Fatal("unreachable after 1 s of refused connects, grace is 1 s")
		}
		advance(50 * time.Millisecond) // the next Check
		if p.Reachable("a") {
			t.Fatal("still reachable past the 1 s grace")
		}
		if got := testutil.ToFloat64(p.metrics.unreachable.WithLabelValues(string(agentAbsent))); got != 1 {
			t.Errorf("unreachable{reason=agent_absent} = %v, want 1", got)
		}
		f.set(addrA, forward)
		advance(50 * time.Millisecond)
		if !p.Reachable("a") {
			t.Error("not reachable once serving again")
		}
	})
}

// An agent restart shorter than the grace (refused connects, then SERVING again) changes
// nothing: no change is signalled, the node stays reachable throughout.
func TestProberRestartWithinGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeNet()
		p := newProber(t, fast(f))
		p.Set(map[string]netip.AddrPort{"a": addrA})
		advance(0)
		f.set(addrA, refuse)
		down := time.Now()
		for range 19 { // 950 ms
			advance(50 * time.Millisecond)
			if !p.Reachable("a") {
				t.Fatalf("unreachable after %v of refused connects, grace is 1 s", time.Since(down))
			}
		}
		f.set(addrA, forward)
		advance(time.Second)
		select {
		case <-p.Changed():
			t.Fatal("reachability changed during a restart shorter than the grace")
		default:
		}
		if !p.Reachable("a") || count(p, "connect", refused) != 19 {
			t.Errorf("reachable %v after %v refused connects, want true after 19", p.Reachable("a"), count(p, "connect", refused))
		}
	})
}

// Set is level-triggered: removed nodes are unknown (false), new ones start reachable, and a
// changed address starts the node over.
func TestProberSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeNet()
		p := newProber(t, fast(f))
		f.set(addrB, blackhole)
		p.Set(map[string]netip.AddrPort{"a": addrA})
		p.Set(map[string]netip.AddrPort{"a": addrA, "b": addrB})
		if !p.Reachable("a") || !p.Reachable("b") {
			t.Fatal("new targets start reachable")
		}
		advance(3 * 50 * time.Millisecond)
		if p.Reachable("b") {
			t.Fatal("b reachable after 3 silent probes")
		}
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
	})
}

// Changed coalesces: several transitions leave one pending signal.
func TestProberChangedCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeNet()
		p := newProber(t, fast(f))
		f.set(addrA, blackhole)
		f.set(addrB, blackhole)
		p.Set(map[string]netip.AddrPort{"a": addrA, "b": addrB})
		advance(3 * 50 * time.Millisecond)
		if p.Reachable("a") || p.Reachable("b") {
			t.Fatalf("reachable a=%v b=%v after 3 silent probes, want false false", p.Reachable("a"), p.Reachable("b"))
		}
		if n := len(p.Changed()); n != 1 {
			t.Errorf("%d pending change signals after two transitions, want 1", n)
		}
	})
}

// Removing targets ends their goroutines (and closes their health connections); Stop ends the
// rest.
func TestProberNoGoroutineLeak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeNet()
		p := newProber(t, fast(f))
		targets := map[string]netip.AddrPort{}
		for i := range 12 {
			a := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)}), 9107)
			f.set(a, netMode(i%3))
			targets[a.String()] = a
		}
		p.Set(targets)
		advance(0)
		if n, open := proberGoroutines(), f.openConns(); n != 24 || open != 12 || servingSeen(p) < 4 {
			t.Fatalf("%d probe goroutines and %d health connections with 12 targets (%v SERVING), want 2 per target and 1",
				n, open, servingSeen(p))
		}
		p.Set(nil)
		advance(0)
		noneLeft(t, f, "after removing every target")
		p.Set(targets)
		advance(0)
		if servingSeen(p) < 8 {
			t.Fatalf("%v SERVING once the targets are back, want 8", servingSeen(p))
		}
		stopWithin(t, p)
		advance(0)
		noneLeft(t, f, "after Stop")
		p.Set(targets) // after Stop: nothing starts
		advance(0)
		noneLeft(t, f, "Set after Stop")
	})
}

// proberGoroutines counts the goroutines running a Prober's loops, in the whole process.
func proberGoroutines() int {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	return bytes.Count(buf, []byte("reachability.(*Prober).connectLoop(")) + bytes.Count(buf, []byte("reachability.(*Prober).healthLoop("))
}

func noneLeft(t *testing.T, f *fakeNet, when string) {
	t.Helper()
	if n, open := proberGoroutines(), f.openConns(); n != 0 || open != 0 {
		var b bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Fatalf("%s: %d probe goroutines, %d health connections left:\n%s", when, n, open, b.String())
	}
}
