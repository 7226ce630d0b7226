package reachability

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config tunes a Prober; zero fields take the defaults the package doc justifies.
type Config struct {
	// Interval between two connect probes of a target, and the timeout of each (150 ms).
	Interval time.Duration
	// Misses is how many silent connects in a row make a node unreachable, and how many
	// answered ones in a row it takes to come back (3).
	Misses int
	// Grace is how long a node whose kernel answers may go without its agent saying
	// SERVING (30 s): covers agent restarts and a saturated CPU.
	Grace time.Duration

	healthEvery time.Duration // period and deadline of health Checks (1 s); tests shorten it
	probe       probeFunc     // layer 1; tests inject fake networks and network namespaces
	dial        dialFunc      // layer 2's connection; likewise
	health      healthFunc    // layer 2 (gRPC over dial); tests inject a fake transport, no sockets
}

// healthFunc opens layer 2's connection to addr, which Checks every every.
type healthFunc func(dial dialFunc, addr netip.AddrPort, every time.Duration) (healthChecker, error)

// healthChecker is layer 2's connection to one target: a gRPC health client (healthClient), or
// a test's fake.
type healthChecker interface {
	check(ctx context.Context, timeout time.Duration) (outcome, time.Duration)
	close()
}

// grpcHealth is the production healthFunc.
func grpcHealth(dial dialFunc, addr netip.AddrPort, every time.Duration) (healthChecker, error) {
	hc, err := newHealthClient(dial, addr, every)
	if err != nil {
		return nil, err
	}
	return hc, nil
}

func (c Config) withDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = 150 * time.Millisecond
	}
	if c.Misses <= 0 {
		c.Misses = 3
	}
	if c.Grace <= 0 {
		c.Grace = 30 * time.Second
	}
	if c.healthEvery <= 0 {
		c.healthEvery = time.Second
	}
	if c.probe == nil {
		c.probe = connectProbe
	}
	if c.dial == nil {
		c.dial = dialTCP
	}
	if c.health == nil {
		c.health = grpcHealth
	}
	return c
}

// Prober judges the reachability of a set of nodes for the leader (see the package doc).
// Each target has its own two goroutines, so a silent target never delays another's probes.
type Prober struct {
	cfg     Config
	metrics *metrics
	changed chan struct{}
	wg      sync.WaitGroup

	mu      sync.Mutex
	targets map[string]*target
	stopped bool
}

type target struct {
	addr    netip.AddrPort
	cancel  context.CancelFunc
	verdict *verdict // guarded by Prober.mu
}

// NewProber returns a Prober with no targets.
func NewProber(cfg Config) *Prober {
	return &Prober{
		cfg:     cfg.withDefaults(),
		metrics: newMetrics(),
		changed: make(chan struct{}, 1),
		targets: map[string]*target{},
	}
}

// Set makes targets (node name -> health address) the probed set, level-triggered: new nodes
// start being probed (reachable, see the package doc), removed ones stop, and a node whose
// address changed starts over. It does not wait for removed targets' goroutines to end.
func (p *Prober) Set(targets map[string]netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	for node, t := range p.targets {
		if addr, ok := targets[node]; !ok || addr != t.addr {
			t.cancel()
			delete(p.targets, node)
			p.metrics.reachable.DeleteLabelValues(node)
		}
	}
	for node, addr := range targets {
		if _, ok := p.targets[node]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		t := &target{addr: addr, cancel: cancel, verdict: newVerdict(p.cfg.Misses, p.cfg.Grace, time.Now())}
		p.targets[node] = t
		p.metrics.reachable.WithLabelValues(node).Set(1)
		p.wg.Add(2)
		go p.connectLoop(ctx, node, t)
		go p.healthLoop(ctx, node, t)
	}
}

// Reachable reports the current verdict on node; false for a node not in the set.
func (p *Prober) Reachable(node string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.targets[node]
	return ok && t.verdict.reachable
}

// Changed receives a value after one or more verdicts changed (coalesced: read Reachable
// for every node after it fires).
func (p *Prober) Changed() <-chan struct{} { return p.changed }

// Collectors are the Prober's Prometheus metrics, for the caller's registry.
func (p *Prober) Collectors() []prometheus.Collector { return p.metrics.collectors() }

// Stop ends every probe and waits for all goroutines; Set does nothing afterwards.
func (p *Prober) Stop() {
	p.mu.Lock()
	p.stopped = true
	for node, t := range p.targets {
		t.cancel()
		delete(p.targets, node)
		p.metrics.reachable.DeleteLabelValues(node)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// connectLoop runs layer 1: a handshake every Interval. A ticker, not a sleep after each
// probe, so the rate stays fixed whether probes are answered or time out.
func (p *Prober) connectLoop(ctx context.Context, node string, t *target) {
	defer p.wg.Done()
	tick := time.NewTicker(p.cfg.Interval)
	defer tick.Stop()
	for {
		o, rtt := p.cfg.probe(ctx, t.addr, p.cfg.Interval)
		if ctx.Err() != nil {
			return
		}
		p.record(node, t, "connect", o, rtt)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// healthLoop runs layer 2: a health Check every healthEvery over one connection.
func (p *Prober) healthLoop(ctx context.Context, node string, t *target) {
	defer p.wg.Done()
	hc, err := p.cfg.health(p.cfg.dial, t.addr, p.cfg.healthEvery)
	if err != nil { // only for invalid options: the node then never says SERVING
		p.record(node, t, "health", localError, 0)
		return
	}
	defer hc.close()
	tick := time.NewTicker(p.cfg.healthEvery)
	defer tick.Stop()
	for {
		o, rtt := hc.check(ctx, p.cfg.healthEvery)
		if ctx.Err() != nil {
			return
		}
		p.record(node, t, "health", o, rtt)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// record feeds one outcome to the target's verdict and publishes a change.
func (p *Prober) record(node string, t *target, kind string, o outcome, rtt time.Duration) {
	p.metrics.observe(kind, o, rtt.Seconds())
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.targets[node] != t { // removed (or replaced) meanwhile
		return
	}
	if !t.verdict.record(time.Now(), o) {
		return
	}
	if t.verdict.reachable {
		p.metrics.reachable.WithLabelValues(node).Set(1)
	} else {
		p.metrics.reachable.WithLabelValues(node).Set(0)
		p.metrics.unreachable.WithLabelValues(string(t.verdict.why)).Inc()
	}
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// Unprobed stands for a Prober where probing is disabled (upstream's reachability total
// timeout of 0): every node counts as reachable, so only the Node's Ready condition decides.
type Unprobed struct{}

// Set does nothing.
func (Unprobed) Set(map[string]netip.AddrPort) {}

// Reachable is always true.
func (Unprobed) Reachable(string) bool { return true }

// Changed never fires.
func (Unprobed) Changed() <-chan struct{} { return nil }
