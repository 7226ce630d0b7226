package bfd_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane/bfd"
	"github.com/egressd/egressd/test/frr"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPrivilegedBFDSessionsCPU: CPU this process spends per session with 200 sessions Up
// at 100 ms x 3 against FRR bfdd (200 peers). Run with: make bench-bfd.
func BenchmarkPrivilegedBFDSessionsCPU(b *testing.B) {
	privileged.Require(b)
	const sessions = 200
	us, peer := netns.New(b, "bfd-us"), netns.New(b, "bfd-frr")
	netns.Veth(b, us, "eth0", peer, "eth0")
	// Session i: 10.97.0.i (ours) <-> 10.97.1.i (FRR); FRR keys peers by address.
	var conf strings.Builder
	conf.WriteString("bfd\n")
	var ours, theirs []string
	for i := 1; i <= sessions; i++ {
		ours = append(ours, fmt.Sprintf("10.97.0.%d/16", i))
		theirs = append(theirs, fmt.Sprintf("10.97.1.%d/16", i))
		fmt.Fprintf(&conf, " peer 10.97.0.%d local-address 10.97.1.%d interface eth0\n  receive-interval 100\n  transmit-interval 100\n !\n", i, i)
	}
	conf.WriteString("!\n")
	us.Addr(b, "eth0", ours...)
	peer.Addr(b, "eth0", theirs...)
	f := frr.StartBFDD(b, peer, conf.String())

	var m *bfd.Manager
	if err := us.Do(func() (err error) { m, err = bfd.New(slog.New(slog.NewTextHandler(io.Discard, nil))); return }); err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	timers := bfd.Timers{DesiredMinTx: 100 * time.Millisecond, RequiredMinRx: 100 * time.Millisecond, DetectMult: 3}
	var want []bfd.Config
	for i := 1; i <= sessions; i++ {
		want = append(want, bfd.Config{Peer: netip.MustParseAddr(fmt.Sprintf("10.97.1.%d", i)), Local: netip.MustParseAddr(fmt.Sprintf("10.97.0.%d", i)), Interface: "eth0", Timers: timers})
	}
	if errs := m.Sync(want); len(errs) > 0 {
		b.Fatal(errs)
	}
	deadline := time.Now().Add(30 * time.Second)
	for upCount(m) < sessions && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := upCount(m); n < sessions {
		peers, _ := f.Peers()
		b.Fatalf("%d/%d sessions Up (FRR sees %d)", n, sessions, len(peers))
	}
	time.Sleep(time.Second) // Poll Sequences to the fast rate are over
	window := 10 * time.Second
	sent0 := sent(m)
	c0, w0 := cpuTime(), time.Now()
	time.Sleep(window)
	cpu, wall := cpuTime()-c0, time.Since(w0)
	if n := upCount(m); n < sessions {
		ss := m.Sessions()
		b.Fatalf("only %d sessions stayed Up; e.g. %+v", n, ss[0])
	}
	perSession := float64(cpu.Microseconds()) / wall.Seconds() / sessions
	b.ReportMetric(perSession, "us-cpu/session/s")
	b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "%cpu-200-sessions")
	b.ReportMetric(float64(sent(m)-sent0)/wall.Seconds(), "pkts-sent/s")
}

func upCount(m *bfd.Manager) int {
	n := 0
	for _, s := range m.Sessions() {
		if s.State == bfd.Up {
			n++
		}
	}
	return n
}

func sent(m *bfd.Manager) uint64 {
	var n uint64
	for _, s := range m.Sessions() {
		n += s.Counters.PacketsSent
	}
	return n
}

// BenchmarkPrivilegedBFDDetectionTime: 20 failures of an FRR peer at 100 ms x 3 (detection
// time 300 ms); time from blocking its packets to our Down. Run with: make bench-bfd.
func BenchmarkPrivilegedBFDDetectionTime(b *testing.B) {
	privileged.Require(b)
	const failures = 20
	fast := bfd.Timers{DesiredMinTx: 100 * time.Millisecond, RequiredMinRx: 100 * time.Millisecond, DetectMult: 3}
	p := newPair(b, v4, fast, 100, 100, true)
	events, cancel := p.m.Subscribe()
	defer cancel()
	// took is from the start of the nft command that blocks the peer; sinceLast from the last
	// packet received, which is the detection time proper.
	var took, sinceLast []time.Duration
	for range failures {
		waitUp(b, p, events)
		start := time.Now()
		p.peer.MustRun(b, "nft", "add table inet egt_block; add chain inet egt_block out { type filter hook output priority 0; }; add rule inet egt_block out udp dport 3784 drop")
		tr := waitTransition(b, events, bfd.Down, 5*time.Second)
		took = append(took, tr.At.Sub(start))
		sinceLast = append(sinceLast, tr.At.Sub(p.session(b).LastReceived))
		p.peer.MustRun(b, "nft", "delete table inet egt_block")
	}
	for name, d := range map[string][]time.Duration{"block": took, "lastrx": sinceLast} {
		slices.Sort(d)
		b.ReportMetric(float64(d[0].Microseconds())/1000, "ms-min-from-"+name)
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "ms-median-from-"+name)
		b.ReportMetric(float64(d[len(d)-1].Microseconds())/1000, "ms-max-from-"+name)
	}
	b.ReportMetric(300, "ms-configured-detection")
}

func waitUp(b *testing.B, p *pair, events <-chan bfd.Transition) {
	for _, s := range p.m.Sessions() {
		if s.Key == p.key && s.State == bfd.Up {
			return
		}
	}
	waitTransition(b, events, bfd.Up, 10*time.Second)
}
