package bfd

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const ms = time.Millisecond

type pk struct {
	state       State
	my, your    uint32
	tx, rx      time.Duration
	mult        uint8
	poll, final bool
	demand      bool
	diag        Diag
}

func (p pk) bfd() *layers.BFD {
	if p.my == 0 {
		p.my = 77
	}
	if p.mult == 0 {
		p.mult = 3
	}
	if p.tx == 0 {
		p.tx = 300 * ms
	}
	if p.rx == 0 {
		p.rx = 300 * ms
	}
	return &layers.BFD{
		Version: 1, State: layers.BFDState(p.state), Diagnostic: layers.BFDDiagnostic(p.diag),
		Poll: p.poll, Final: p.final, Demand: p.demand,
		DetectMultiplier: layers.BFDDetectMultiplier(p.mult),
		MyDiscriminator:  layers.BFDDiscriminator(p.my), YourDiscriminator: layers.BFDDiscriminator(p.your),
		DesiredMinTxInterval: layers.BFDTimeInterval(usec(p.tx)), RequiredMinRxInterval: layers.BFDTimeInterval(usec(p.rx)),
	}
}

func testSession(t Timers) *session {
	return newSession(Key{Peer: netip.MustParseAddr("192.0.2.1")}, t, 42, t0, func() float64 { return 0.5 })
}

// sessionIn brings a fresh session to state st through legal transitions.
func sessionIn(st State) *session {
	s := testSession(DefaultTimers)
	switch st {
	case Init:
		s.receive(pk{state: Down}.bfd(), t0)
	case Up:
		s.receive(pk{state: Init, your: 42}.bfd(), t0)
		s.receive(pk{state: Up, your: 42, final: true}.bfd(), t0)
	case AdminDown:
		s.adminDown(t0)
	}
	if s.state != st {
		panic("setup: state " + s.state.String())
	}
	return s
}

// TestReceptionStateTable walks RFC 5880 section 6.8.6 ("If bfd.SessionState is ...") for every
// local state and every received state.
func TestReceptionStateTable(t *testing.T) {
	cases := []struct {
		local, remote State
		want          State
		diag          Diag
	}{
		{Down, AdminDown, Down, DiagNone},
		{Down, Down, Init, DiagNone},
		{Down, Init, Up, DiagNone},
		{Down, Up, Down, DiagNone},
		{Init, AdminDown, Down, DiagNeighborSignalDown},
		{Init, Down, Init, DiagNone},
		{Init, Init, Up, DiagNone},
		{Init, Up, Up, DiagNone},
		{Up, AdminDown, Down, DiagNeighborSignalDown},
		{Up, Down, Down, DiagNeighborSignalDown},
		{Up, Init, Up, DiagNone},
		{Up, Up, Up, DiagNone},
		{AdminDown, Down, AdminDown, DiagAdminDown},
		{AdminDown, Up, AdminDown, DiagAdminDown},
	}
	for _, c := range cases {
		s := sessionIn(c.local)
		your := uint32(42)
		if c.remote == Down || c.remote == AdminDown {
			your = 0
		}
		tr := s.receive(pk{state: c.remote, your: your}.bfd(), t0.Add(ms))
		if s.state != c.want || s.localDiag != c.diag {
			t.Errorf("%s + received %s: state %s diag %q, want %s %q", c.local, c.remote, s.state, s.localDiag, c.want, c.diag)
		}
		if (tr != nil) != (c.local != c.want) {
			t.Errorf("%s + received %s: transition %+v", c.local, c.remote, tr)
		}
		if tr != nil && (tr.From != c.local || tr.To != c.want) {
			t.Errorf("%s + received %s: transition %s->%s", c.local, c.remote, tr.From, tr.To)
		}
	}
}

// Not Up: at least 1 s between packets. Up: the configured rate, switched with a Poll Sequence.
func TestSlowRateUntilUpThenPoll(t *testing.T) {
	s := testSession(DefaultTimers)
	if p := s.packet(false); p.DesiredMinTxInterval != 1_000_000 || p.Poll {
		t.Fatalf("Down: desired min tx %d poll %v, want 1000000 without poll", p.DesiredMinTxInterval, p.Poll)
	}
	if s.txInterval() != time.Second {
		t.Fatalf("Down: tx interval %s", s.txInterval())
	}
	s.receive(pk{state: Init, your: 42}.bfd(), t0)
	if s.state != Up {
		t.Fatalf("state %s", s.state)
	}
	p := s.packet(false)
	if p.DesiredMinTxInterval != 300_000 || !p.Poll {
		t.Fatalf("Up: desired %d poll %v, want 300000 with poll", p.DesiredMinTxInterval, p.Poll)
	}
	if s.txInterval() != 300*ms { // a decrease applies at once
		t.Fatalf("Up: tx interval %s", s.txInterval())
	}
	s.receive(pk{state: Up, your: 42, final: true}.bfd(), t0.Add(10*ms))
	if s.polling || s.packet(false).Poll {
		t.Fatal("Final did not end the Poll Sequence")
	}
	// Back to Down: slow rate again, no poll.
	s.receive(pk{state: Down}.bfd(), t0.Add(20*ms))
	if p := s.packet(false); s.state != Down || p.DesiredMinTxInterval != 1_000_000 || p.Poll {
		t.Fatalf("after Down: %s desired %d poll %v", s.state, p.DesiredMinTxInterval, p.Poll)
	}
}

func TestPeerPollIsAnsweredWithFinal(t *testing.T) {
	s := sessionIn(Up)
	s.receive(pk{state: Up, your: 42, poll: true, tx: 100 * ms, rx: 100 * ms}.bfd(), t0.Add(ms))
	if !s.owesFinal {
		t.Fatal("poll not noted")
	}
	p := s.packet(true)
	if !p.Final || p.Poll {
		t.Fatalf("answer to poll: final %v poll %v", p.Final, p.Poll)
	}
	if s.txInterval() != 300*ms || s.detectionTime() != 900*ms {
		t.Fatalf("after peer sped up to 100ms: tx %s detect %s, want 300ms 900ms (our own limits)", s.txInterval(), s.detectionTime())
	}
}

func TestNegotiation(t *testing.T) {
	s := sessionIn(Up)
	s.receive(pk{state: Up, your: 42, tx: 1000 * ms, rx: 500 * ms, mult: 5}.bfd(), t0.Add(ms))
	if s.txInterval() != 500*ms {
		t.Errorf("tx interval %s, want the peer's required min rx 500ms", s.txInterval())
	}
	if s.detectionTime() != 5*time.Second {
		t.Errorf("detection %s, want peer mult 5 x its 1s tx", s.detectionTime())
	}
}

func TestDetectionTimeExpiry(t *testing.T) {
	s := sessionIn(Up)
	at := t0.Add(time.Second)
	s.receive(pk{state: Up, your: 42}.bfd(), at)
	if tr := s.expire(at.Add(899 * ms)); tr != nil {
		t.Fatalf("expired early: %+v", tr)
	}
	tr := s.expire(at.Add(900 * ms))
	if tr == nil || tr.To != Down || tr.Diag != DiagTimeExpired || s.remoteDisc != 0 {
		t.Fatalf("at detection time: %+v remoteDisc %d", tr, s.remoteDisc)
	}
	if s.localDiag.String() != "control detection time expired" {
		t.Errorf("diag text %q", s.localDiag)
	}
	if s.expire(at.Add(2*time.Second)) != nil {
		t.Error("expired twice")
	}
	if s.counters.Detections != 1 {
		t.Errorf("%d detection events, want 1", s.counters.Detections)
	}
}

// New timers on a session that is not Up apply at once, under the one-second floor of
// RFC 5880 section 6.8.3, with no Poll Sequence (there is no peer to negotiate with).
func TestReconfigureWhileDown(t *testing.T) {
	s := sessionIn(Down)
	s.reconfigure(Timers{DesiredMinTx: 2 * time.Second, RequiredMinRx: 500 * ms, DetectMult: 5})
	p := s.packet(false)
	if p.DesiredMinTxInterval != 2_000_000 || p.RequiredMinRxInterval != 500_000 || p.DetectMultiplier != 5 || p.Poll {
		t.Fatalf("advertised tx %d rx %d mult %d poll %v", p.DesiredMinTxInterval, p.RequiredMinRxInterval, p.DetectMultiplier, p.Poll)
	}
	if s.txInterval() != 2*time.Second {
		t.Errorf("tx interval %s, want 2s", s.txInterval())
	}
	s.reconfigure(Timers{DesiredMinTx: 100 * ms, RequiredMinRx: 100 * ms, DetectMult: 3})
	if p := s.packet(false); p.DesiredMinTxInterval != 1_000_000 || s.txInterval() != time.Second {
		t.Errorf("below the floor: advertised %d, tx %s; want 1s while Down", p.DesiredMinTxInterval, s.txInterval())
	}
}

// An increased Desired Min TX is used only after the Final; a reduced Required Min RX is used
// for detection only after the Final (RFC 5880 section 6.8.3).
func TestOwnTimerChangesWaitForFinal(t *testing.T) {
	s := sessionIn(Up)
	s.receive(pk{state: Up, your: 42, tx: 50 * ms, rx: 50 * ms}.bfd(), t0.Add(ms))
	s.reconfigure(Timers{DesiredMinTx: 600 * ms, RequiredMinRx: 100 * ms, DetectMult: 3})
	if !s.polling {
		t.Fatal("no poll started")
	}
	if p := s.packet(false); p.DesiredMinTxInterval != 600_000 || p.RequiredMinRxInterval != 100_000 {
		t.Fatalf("advertised %d/%d", p.DesiredMinTxInterval, p.RequiredMinRxInterval)
	}
	if s.txInterval() != 300*ms || s.detectionTime() != 900*ms {
		t.Fatalf("before Final: tx %s detect %s, want old 300ms / 900ms", s.txInterval(), s.detectionTime())
	}
	s.receive(pk{state: Up, your: 42, tx: 50 * ms, rx: 50 * ms, final: true}.bfd(), t0.Add(2*ms))
	if s.txInterval() != 600*ms || s.detectionTime() != 300*ms {
		t.Fatalf("after Final: tx %s detect %s, want 600ms / 300ms", s.txInterval(), s.detectionTime())
	}
}

func TestJitterBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, mult := range []uint8{3, 1} {
		s := newSession(Key{}, Timers{DesiredMinTx: 100 * ms, RequiredMinRx: 100 * ms, DetectMult: mult}, 1, t0, r.Float64)
		s.state, s.txBasis, s.remoteMinRx = Up, 100_000, 100_000
		lo, hi := 75*ms, 100*ms
		if mult == 1 {
			hi = 90 * ms
		}
		minSeen, maxSeen := time.Hour, time.Duration(0)
		for range 10000 {
			s.scheduleTx(t0)
			d := s.nextTx.Sub(t0)
			minSeen, maxSeen = min(minSeen, d), max(maxSeen, d)
		}
		if minSeen < lo || maxSeen >= hi || maxSeen-minSeen < (hi-lo)*9/10 {
			t.Errorf("mult %d: intervals in [%s, %s], want spread over [%s, %s)", mult, minSeen, maxSeen, lo, hi)
		}
	}
}

func TestNoPeriodicPackets(t *testing.T) {
	s := sessionIn(Up)
	s.receive(pk{state: Up, your: 42, rx: time.Nanosecond}.bfd(), t0) // rx rounds to 0 us
	if s.shouldSendPeriodic(t0.Add(time.Hour)) {
		t.Error("sent while the peer's Required Min RX is 0")
	}
	s.receive(pk{state: Up, your: 42, demand: true}.bfd(), t0)
	if s.shouldSendPeriodic(t0.Add(2 * time.Hour)) {
		t.Error("sent periodic packets to a peer in demand mode with both Up")
	}
}

func TestRemoteAdminDownStopsDetection(t *testing.T) {
	s := sessionIn(Up)
	tr := s.receive(pk{state: AdminDown, diag: DiagAdminDown}.bfd(), t0.Add(ms))
	if tr == nil || tr.Diag != DiagNeighborSignalDown || tr.RemoteDiag != DiagAdminDown || tr.RemoteState != AdminDown {
		t.Fatalf("transition %+v", tr)
	}
	if !s.detectAt.IsZero() {
		t.Error("detection timer still armed while the peer is administratively down")
	}
}

func TestAdminDownAnnouncesThenRemoves(t *testing.T) {
	s := sessionIn(Up)
	tr := s.adminDown(t0)
	if tr.To != AdminDown || s.packet(false).State != layers.BFDStateAdminDown || s.packet(false).Diagnostic != layers.BFDDiagnosticAdminDown {
		t.Fatalf("admin down: %+v", tr)
	}
	if s.removeAt.Sub(t0) != 3*s.txInterval() {
		t.Errorf("announced for %s", s.removeAt.Sub(t0))
	}
}

func TestDropReasons(t *testing.T) {
	good := pk{state: Up, your: 42}.bfd()
	if r := dropReason(good); r != dropNone {
		t.Fatalf("good packet dropped: %s", r)
	}
	for reason, mutate := range map[string]func(*layers.BFD){
		"version":            func(p *layers.BFD) { p.Version = 0 },
		"auth":               func(p *layers.BFD) { p.AuthPresent = true },
		"detect_mult":        func(p *layers.BFD) { p.DetectMultiplier = 0 },
		"multipoint":         func(p *layers.BFD) { p.Multipoint = true },
		"my_discriminator":   func(p *layers.BFD) { p.MyDiscriminator = 0 },
		"your_discriminator": func(p *layers.BFD) { p.YourDiscriminator = 0 },
	} {
		p := *good
		mutate(&p)
		if got := dropReason(&p); got.String() != reason {
			t.Errorf("%s: got %q", reason, got)
		}
	}
}
