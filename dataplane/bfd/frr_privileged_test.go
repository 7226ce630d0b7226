package bfd_test

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/ipv4"

	"github.com/egressd/egressd/dataplane/bfd"
	"github.com/egressd/egressd/test/frr"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// pair is our Manager in one namespace and FRR bfdd in another, on a veth.
type pair struct {
	us, peer  *netns.NS
	frr       *frr.Daemons
	m         *bfd.Manager
	key       bfd.Key
	peerLine  string
	localAddr netip.Addr
}

type family struct {
	name         string
	ours, theirs string // addresses
	prefixLen    int
}

var (
	v4 = family{"IPv4", "10.99.0.1", "10.99.0.2", 24}
	v6 = family{"IPv6", "fd99::1", "fd99::2", 64}
)

func frrConf(f family, txMs, rxMs int) string {
	return fmt.Sprintf("bfd\n peer %s local-address %s interface eth0\n  receive-interval %d\n  transmit-interval %d\n  detect-multiplier 3\n !\n!\n",
		f.ours, f.theirs, rxMs, txMs)
}

// newPair builds the topology; frrFirst starts FRR before our session exists.
func newPair(t testing.TB, f family, ours bfd.Timers, frrTxMs, frrRxMs int, frrFirst bool) *pair {
	t.Helper()
	p := &pair{us: netns.New(t, "bfd-us"), peer: netns.New(t, "bfd-frr")}
	netns.Veth(t, p.us, "eth0", p.peer, "eth0")
	p.us.Addr(t, "eth0", fmt.Sprintf("%s/%d", f.ours, f.prefixLen))
	p.peer.Addr(t, "eth0", fmt.Sprintf("%s/%d", f.theirs, f.prefixLen))
	p.localAddr = netip.MustParseAddr(f.ours)
	p.key = bfd.Key{Peer: netip.MustParseAddr(f.theirs), Interface: "eth0"}
	p.peerLine = fmt.Sprintf("peer %s local-address %s interface eth0", f.ours, f.theirs)
	startFRR := func() { p.frr = frr.StartBFDD(t, p.peer, frrConf(f, frrTxMs, frrRxMs)) }
	if frrFirst {
		startFRR()
		time.Sleep(1500 * time.Millisecond) // FRR has been sending into the void for a while
	}
	err := p.us.Do(func() error {
		var err error
		p.m, err = bfd.New(slog.New(slog.NewTextHandler(io.Discard, nil)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.m.Close)
	if errs := p.m.Sync([]bfd.Config{p.config(ours)}); len(errs) > 0 {
		t.Fatal(errs)
	}
	if !frrFirst {
		time.Sleep(1500 * time.Millisecond) // we have been sending into the void for a while
		startFRR()
	}
	return p
}

// config is our side's session with the given timers.
func (p *pair) config(timers bfd.Timers) bfd.Config {
	return bfd.Config{Peer: p.key.Peer, Local: p.localAddr, Interface: "eth0", Timers: timers}
}

func (p *pair) session(t testing.TB) bfd.SessionInfo {
	t.Helper()
	for _, s := range p.m.Sessions() {
		if s.Key == p.key {
			return s
		}
	}
	t.Fatalf("no session %s", p.key)
	return bfd.SessionInfo{}
}

func (p *pair) waitBoth(t testing.TB, ours bfd.State, theirs string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if p.session(t).State == ours && p.frr.PeerStatus(p.localAddr.String()) == theirs {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("after %s: ours %s (want %s), FRR %q (want %q)", timeout, p.session(t).State, ours, p.frr.PeerStatus(p.localAddr.String()), theirs)
}

// waitTransition waits for our session to enter state, returning the transition.
func waitTransition(t testing.TB, ch <-chan bfd.Transition, to bfd.State, timeout time.Duration) bfd.Transition {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case tr := <-ch:
			if tr.To == to {
				return tr
			}
		case <-deadline:
			t.Fatalf("no transition to %s within %s", to, timeout)
		}
	}
}

// Sessions come Up over IPv4 and IPv6, whichever side starts first.
func TestPrivilegedBFDInteropFRRComesUp(t *testing.T) {
	privileged.Require(t)
	for _, f := range []family{v4, v6} {
		for _, frrFirst := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/frrFirst=%v", f.name, frrFirst), func(t *testing.T) {
				p := newPair(t, f, bfd.DefaultTimers, 300, 300, frrFirst)
				p.waitBoth(t, bfd.Up, "up", 10*time.Second)
				s := p.session(t)
				if s.TxInterval != 300*time.Millisecond || s.DetectionTime != 900*time.Millisecond {
					t.Errorf("negotiated tx %s detect %s, want 300ms / 900ms", s.TxInterval, s.DetectionTime)
				}
				if s.RemoteDisc == 0 || s.Counters.PacketsReceived == 0 {
					t.Errorf("session %+v", s)
				}
			})
		}
	}
}

// FRR changing its timers while Up (a Poll Sequence) keeps the session Up at the new rate.
func TestPrivilegedBFDInteropFRRTimerChange(t *testing.T) {
	privileged.Require(t)
	fast := bfd.Timers{DesiredMinTx: 50 * time.Millisecond, RequiredMinRx: 50 * time.Millisecond, DetectMult: 3}
	p := newPair(t, v4, fast, 300, 300, true)
	p.waitBoth(t, bfd.Up, "up", 10*time.Second)
	events, cancel := p.m.Subscribe()
	defer cancel()
	before := p.session(t)
	if before.DetectionTime != 900*time.Millisecond {
		t.Fatalf("detection %s before the change, want 3 x FRR's 300ms", before.DetectionTime)
	}
	if err := p.frr.Configure(p.peerLine, "transmit-interval 100", "receive-interval 100"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.session(t).DetectionTime != 300*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	after := p.session(t)
	if after.DetectionTime != 300*time.Millisecond || after.TxInterval != 100*time.Millisecond {
		t.Fatalf("after FRR moved to 100ms: detection %s tx %s, want 300ms / 100ms", after.DetectionTime, after.TxInterval)
	}
	// Stay Up across the change and a while at the new rate.
	time.Sleep(2 * time.Second)
	select {
	case tr := <-events:
		t.Fatalf("state changed during the timer change: %+v", tr)
	default:
	}
	if s := p.session(t); s.State != bfd.Up || s.Counters.Transitions != before.Counters.Transitions {
		t.Fatalf("session %+v", s)
	}
	if peers, _ := p.frr.Peers(); len(peers) != 1 || peers[0].Status != "up" || peers[0].TransmitInterval != 100 {
		t.Fatalf("FRR: %+v", peers)
	}
}

// Sync with new timers while Up changes them in place with a Poll Sequence: against FRR the
// session stays Up with the same discriminators, faster and then slower, and each side runs at
// the new rates.
func TestPrivilegedBFDInteropFRRSyncTimerChange(t *testing.T) {
	privileged.Require(t)
	p := newPair(t, v4, bfd.DefaultTimers, 100, 100, true) // FRR at 100 ms: our 300 ms rules both ways
	p.waitBoth(t, bfd.Up, "up", 10*time.Second)
	events, cancel := p.m.Subscribe()
	defer cancel()
	before := p.session(t)
	if before.TxInterval != 300*time.Millisecond || before.DetectionTime != 900*time.Millisecond {
		t.Fatalf("before: tx %s detection %s, want 300ms / 900ms", before.TxInterval, before.DetectionTime)
	}
	for _, c := range []struct {
		name       string
		timers     bfd.Timers
		tx, detect time.Duration // ours once negotiated: FRR sends every 100 ms, multiplier 3
	}{
		{"faster", bfd.Timers{DesiredMinTx: 100 * time.Millisecond, RequiredMinRx: 100 * time.Millisecond, DetectMult: 3}, 100 * time.Millisecond, 300 * time.Millisecond},
		{"slower", bfd.Timers{DesiredMinTx: 500 * time.Millisecond, RequiredMinRx: 400 * time.Millisecond, DetectMult: 5}, 500 * time.Millisecond, 1200 * time.Millisecond},
	} {
		if errs := p.m.Sync([]bfd.Config{p.config(c.timers)}); len(errs) > 0 {
			t.Fatal(errs)
		}
		frrSees := func() bool {
			peers, _ := p.frr.Peers()
			return len(peers) == 1 && peers[0].Status == "up" && peers[0].RemoteTransmit == int(c.timers.DesiredMinTx.Milliseconds()) &&
				peers[0].RemoteReceive == int(c.timers.RequiredMinRx.Milliseconds()) && peers[0].RemoteMult == int(c.timers.DetectMult)
		}
		deadline := time.Now().Add(5 * time.Second)
		for s := p.session(t); (s.TxInterval != c.tx || s.DetectionTime != c.detect || !frrSees()) && time.Now().Before(deadline); s = p.session(t) {
			time.Sleep(20 * time.Millisecond)
		}
		s := p.session(t)
		peers, _ := p.frr.Peers()
		if s.TxInterval != c.tx || s.DetectionTime != c.detect || !frrSees() {
			t.Fatalf("%s: ours tx %s detection %s (want %s / %s); FRR %+v", c.name, s.TxInterval, s.DetectionTime, c.tx, c.detect, peers)
		}
		time.Sleep(2 * time.Second) // a while at the new rates
		select {
		case tr := <-events:
			t.Fatalf("%s: state changed: %+v", c.name, tr)
		default:
		}
		s = p.session(t)
		if s.State != bfd.Up || s.LocalDisc != before.LocalDisc || s.RemoteDisc != before.RemoteDisc || s.Counters.Transitions != before.Counters.Transitions {
			t.Fatalf("%s: session reset: before %+v, after %+v", c.name, before, s)
		}
		if peers, _ := p.frr.Peers(); len(peers) != 1 || peers[0].Status != "up" || peers[0].RemoteID != before.LocalDisc || peers[0].ID != before.RemoteDisc {
			t.Fatalf("%s: FRR %+v", c.name, peers)
		}
	}
}

// Blocking the peer's packets brings our side Down with "control detection time expired"
// within the detection time plus one transmit interval; unblocking brings it back Up.
func TestPrivilegedBFDInteropFRRDetectsFailure(t *testing.T) {
	privileged.Require(t)
	for _, f := range []family{v4, v6} {
		t.Run(f.name, func(t *testing.T) {
			p := newPair(t, f, bfd.DefaultTimers, 300, 300, true)
			p.waitBoth(t, bfd.Up, "up", 10*time.Second)
			events, cancel := p.m.Subscribe()
			defer cancel()
			s := p.session(t)
			bound := s.DetectionTime + s.TxInterval

			start := time.Now()
			p.peer.MustRun(t, "nft", "add table inet egt_block; add chain inet egt_block out { type filter hook output priority 0; }; add rule inet egt_block out udp dport 3784 drop")
			tr := waitTransition(t, events, bfd.Down, 5*time.Second)
			took := tr.At.Sub(start)
			t.Logf("Down %s after blocking (detection time %s, bound %s)", took.Round(time.Millisecond), s.DetectionTime, bound)
			if took > bound {
				t.Errorf("detection took %s, more than detection time + one tx interval = %s", took, bound)
			}
			if tr.Diag != bfd.DiagTimeExpired || tr.Diag.String() != "control detection time expired" {
				t.Errorf("diag %q", tr.Diag)
			}
			if n := p.session(t).Counters.Detections; n != 1 {
				t.Errorf("%d detection events, want 1", n)
			}

			p.peer.MustRun(t, "nft", "delete table inet egt_block")
			waitTransition(t, events, bfd.Up, 10*time.Second)
		})
	}
}

// FRR "shutdown" of the peer brings us Down with its diag (administratively down); "no
// shutdown" recovers.
func TestPrivilegedBFDInteropFRRShutdown(t *testing.T) {
	privileged.Require(t)
	p := newPair(t, v4, bfd.DefaultTimers, 300, 300, false)
	p.waitBoth(t, bfd.Up, "up", 10*time.Second)
	events, cancel := p.m.Subscribe()
	defer cancel()
	if err := p.frr.Configure(p.peerLine, "shutdown"); err != nil {
		t.Fatal(err)
	}
	tr := waitTransition(t, events, bfd.Down, 3*time.Second)
	if tr.Diag != bfd.DiagNeighborSignalDown || tr.RemoteState != bfd.AdminDown {
		t.Errorf("diag %q remote state %s, want neighbor signaled session down / AdminDown", tr.Diag, tr.RemoteState)
	}
	if err := p.frr.Configure(p.peerLine, "no shutdown"); err != nil {
		t.Fatal(err)
	}
	waitTransition(t, events, bfd.Up, 10*time.Second)
	p.waitBoth(t, bfd.Up, "up", 5*time.Second)
}

// Removing a session tells FRR we are administratively down rather than failed.
func TestPrivilegedBFDInteropFRRSeesOurAdminDown(t *testing.T) {
	privileged.Require(t)
	p := newPair(t, v4, bfd.DefaultTimers, 300, 300, true)
	p.waitBoth(t, bfd.Up, "up", 10*time.Second)
	if errs := p.m.Sync(nil); len(errs) > 0 {
		t.Fatal(errs)
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		peers, _ := p.frr.Peers()
		if len(peers) == 1 && peers[0].Status == "down" {
			if peers[0].RemoteDiagnostic != "administratively down" {
				t.Errorf("FRR remote diagnostic %q", peers[0].RemoteDiagnostic)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("FRR did not see the session go down")
}

// A packet with a TTL other than 255 is dropped (GTSM, RFC 5881 section 5) and counted; the
// session's metrics show it Up.
func TestPrivilegedBFDInteropFRRDropsWrongTTLAndExportsMetrics(t *testing.T) {
	privileged.Require(t)
	p := newPair(t, v4, bfd.DefaultTimers, 300, 300, true)
	p.waitBoth(t, bfd.Up, "up", 10*time.Second)
	s := p.session(t)
	spoof := layers.BFD{Version: 1, State: layers.BFDStateDown, DetectMultiplier: 3, MyDiscriminator: 9,
		YourDiscriminator: layers.BFDDiscriminator(s.LocalDisc), DesiredMinTxInterval: 1_000_000, RequiredMinRxInterval: 1_000_000}
	buf := gopacket.NewSerializeBuffer()
	if err := spoof.SerializeTo(buf, gopacket.SerializeOptions{}); err != nil {
		t.Fatal(err)
	}
	err := p.peer.Do(func() error {
		c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(v4.theirs)}, &net.UDPAddr{IP: net.ParseIP(v4.ours), Port: bfd.ControlPort})
		if err != nil {
			return err
		}
		defer c.Close()
		if err := ipv4.NewConn(c).SetTTL(64); err != nil {
			return err
		}
		_, err = c.Write(buf.Bytes())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.m.Collectors()...)
	ttlDrops := func() float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if mf.GetName() == "egressd_bfd_packets_dropped_total" && m.GetLabel()[0].GetValue() == "ttl" {
					return m.GetCounter().GetValue()
				}
			}
		}
		return -1
	}
	deadline := time.Now().Add(2 * time.Second)
	for ttlDrops() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := ttlDrops(); n != 1 {
		t.Fatalf("%v ttl drops, want 1", n)
	}
	if st := p.session(t).State; st != bfd.Up {
		t.Fatalf("a TTL-64 Down packet changed the session to %s", st)
	}

	want := fmt.Sprintf(`
# HELP egressd_bfd_session_state 1 for the current state of each BFD session.
# TYPE egressd_bfd_session_state gauge
egressd_bfd_session_state{interface="eth0",peer="%[1]s",state="AdminDown"} 0
egressd_bfd_session_state{interface="eth0",peer="%[1]s",state="Down"} 0
egressd_bfd_session_state{interface="eth0",peer="%[1]s",state="Init"} 0
egressd_bfd_session_state{interface="eth0",peer="%[1]s",state="Up"} 1
# HELP egressd_bfd_sessions BFD sessions in each state.
# TYPE egressd_bfd_sessions gauge
egressd_bfd_sessions{state="AdminDown"} 0
egressd_bfd_sessions{state="Down"} 0
egressd_bfd_sessions{state="Init"} 0
egressd_bfd_sessions{state="Up"} 1
# HELP egressd_bfd_detection_events_total Times a BFD session went Down because the peer fell silent for the detection time.
# TYPE egressd_bfd_detection_events_total counter
egressd_bfd_detection_events_total{interface="eth0",peer="%[1]s"} 0
# HELP egressd_bfd_packets_dropped_total Received BFD packets discarded: malformed, wrong TTL, unknown session, or failing RFC 5880 checks.
# TYPE egressd_bfd_packets_dropped_total counter
egressd_bfd_packets_dropped_total{reason="auth"} 0
egressd_bfd_packets_dropped_total{reason="detect_mult"} 0
egressd_bfd_packets_dropped_total{reason="malformed"} 0
egressd_bfd_packets_dropped_total{reason="multipoint"} 0
egressd_bfd_packets_dropped_total{reason="my_discriminator"} 0
egressd_bfd_packets_dropped_total{reason="no_session"} 0
egressd_bfd_packets_dropped_total{reason="ttl"} 1
egressd_bfd_packets_dropped_total{reason="version"} 0
egressd_bfd_packets_dropped_total{reason="your_discriminator"} 0
`, v4.theirs)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "egressd_bfd_session_state", "egressd_bfd_sessions",
		"egressd_bfd_detection_events_total", "egressd_bfd_packets_dropped_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "egressd_bfd_packets_received_total", "egressd_bfd_detection_time_seconds", "egressd_bfd_state_transitions_total"); err != nil || n != 3 {
		t.Errorf("per-session counters: %d, %v", n, err)
	}
}
