package reachability

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// linkLab is a leader and a node on one L2 fabric (a bridge in its own namespace). The node's
// agent serves inside the node namespace; the prober dials from the leader namespace. Taking
// the node's link down leaves the leader's link up: its SYNs are sent and never answered, as
// when a node's NIC, cable or kernel dies.
type linkLab struct {
	prober   *Prober
	nodeLink netlink.Link
	nodeNL   *netlink.Handle
}

func newLinkLab(t testing.TB) *linkLab {
	t.Helper()
	fabric, leader, node := netns.New(t, "fab"), netns.New(t, "lead"), netns.New(t, "node")
	if err := fabric.Script("ip link add br0 type bridge", "ip link set br0 up"); err != nil {
		t.Fatal(err)
	}
	netns.Veth(t, leader, "eth0", fabric, "l0")
	netns.Veth(t, node, "eth0", fabric, "n0")
	if err := fabric.Script("ip link set l0 master br0", "ip link set n0 master br0"); err != nil {
		t.Fatal(err)
	}
	leader.Addr(t, "eth0", "10.250.0.1/24")
	node.Addr(t, "eth0", "10.250.0.2/24")

	server := NewServer("10.250.0.2:9107")
	if err := node.Do(server.Start); err != nil { // the listening socket lives in the node namespace
		t.Fatal(err)
	}
	t.Cleanup(server.Stop)

	h, err := vnetns.GetFromPath(node.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nl.Close)
	link, err := nl.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}

	dial := func(ctx context.Context, addr netip.AddrPort) (c net.Conn, err error) {
		err = leader.Do(func() error {
			var derr error
			c, derr = dialTCP(ctx, addr) // the production dialer, from the leader namespace
			return derr
		})
		return c, err
	}
	probe := func(ctx context.Context, addr netip.AddrPort, timeout time.Duration) (o outcome, rtt time.Duration) {
		_ = leader.Do(func() error {
			o, rtt = connectProbe(ctx, addr, timeout) // the production probe, from the leader namespace
			return nil
		})
		return o, rtt
	}
	p := newProber(t, Config{probe: probe, dial: dial}) // production timings: 150 ms x 3, health every 1 s
	p.Set(map[string]netip.AddrPort{"node": server.Addr()})
	return &linkLab{prober: p, nodeLink: link, nodeNL: nl}
}

// trial waits for the node to be reachable and serving, takes its link down, and returns how
// long the prober took to declare it unreachable; then it brings the link back.
func (l *linkLab) trial(t testing.TB) time.Duration {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	served := servingSeen(l.prober)
	for !l.prober.Reachable("node") || servingSeen(l.prober) < served+1 {
		if time.Now().After(deadline) {
			t.Fatal("node not reachable and serving within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	select { // forget earlier changes
	case <-l.prober.Changed():
	default:
	}
	// Seen SERVING fixes the phase against the probe ticker: a random wait of up to one
	// interval makes the failure land anywhere between two probes, as a real one does.
	time.Sleep(rand.N(l.prober.cfg.Interval))
	if err := l.nodeNL.LinkSetDown(l.nodeLink); err != nil {
		t.Fatal(err)
	}
	down := time.Now() // the netlink ack: the link is down
	defer func() {
		if err := l.nodeNL.LinkSetUp(l.nodeLink); err != nil {
			t.Fatal(err)
		}
	}()
	timeout := time.After(5 * time.Second)
	for l.prober.Reachable("node") {
		select {
		case <-l.prober.Changed():
		case <-timeout:
			t.Fatal("link down not detected within 5 s")
		}
	}
	return time.Since(down)
}

// A node whose link goes down is unreachable in well under a second: not before Misses-1
// intervals (the rule is applied) and before one second.
func TestPrivilegedLinkDownDetectedWithinASecond(t *testing.T) {
	privileged.Require(t)
	l := newLinkLab(t)
	took := l.trial(t)
	t.Logf("link down detected in %v", took)
	if took < 300*time.Millisecond || took > time.Second {
		t.Errorf("link down detected in %v, want 450-600 ms (150 ms x 3, at least 2 intervals, at most 1 s)", took)
	}
	if got := servingSeen(l.prober); got == 0 {
		t.Error("SERVING never seen from the node namespace")
	}
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for !l.prober.Reachable("node") {
		if time.Now().After(deadline) {
			t.Fatal("node not reachable again 10 s after its link came back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("reachable again %v after link up", time.Since(start))
}

// Detection time of a link down over 10 trials, with the production timings:
//
//	go test ./nodeagent/reachability -run '^$' -bench PrivilegedLinkDown -benchtime 1x
func BenchmarkPrivilegedLinkDownDetection(b *testing.B) {
	privileged.Require(b)
	l := newLinkLab(b)
	for b.Loop() {
		var took []time.Duration
		for range 10 {
			took = append(took, l.trial(b))
		}
		slices.Sort(took)
		b.Logf("link down detection over %d trials: min %v, median %v, max %v (all: %v)",
			len(took), took[0], took[len(took)/2], took[len(took)-1], took)
		b.ReportMetric(float64(took[0].Milliseconds()), "min-ms")
		b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "median-ms")
		b.ReportMetric(float64(took[len(took)-1].Milliseconds()), "max-ms")
	}
}
