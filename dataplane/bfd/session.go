package bfd

import (
	"net/netip"
	"time"

	"github.com/gopacket/gopacket/layers"
)

// State of a session (RFC 5880 section 4.1 values).
type State uint8

// Session states.
const (
	AdminDown State = State(layers.BFDStateAdminDown)
	Down      State = State(layers.BFDStateDown)
	Init      State = State(layers.BFDStateInit)
	Up        State = State(layers.BFDStateUp)
)

func (s State) String() string {
	switch s {
	case AdminDown:
		return "AdminDown"
	case Down:
		return "Down"
	case Init:
		return "Init"
	case Up:
		return "Up"
	}
	return "Unknown"
}

// Diag is a diagnostic code (RFC 5880 section 4.1).
type Diag uint8

// Diagnostic codes this package sets or reports.
const (
	DiagNone               Diag = Diag(layers.BFDDiagnosticNone)
	DiagTimeExpired        Diag = Diag(layers.BFDDiagnosticTimeExpired)
	DiagNeighborSignalDown Diag = Diag(layers.BFDDiagnosticNeighborSignalDown)
	DiagAdminDown          Diag = Diag(layers.BFDDiagnosticAdminDown)
)

// String is the RFC's text, lower-cased as operators read it in logs ("control detection time
// expired").
func (d Diag) String() string { return lower(layers.BFDDiagnostic(d).String()) }

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Timers of a session.
type Timers struct {
	// DesiredMinTx is the fastest rate this side wants to send at once Up.
	DesiredMinTx time.Duration
	// RequiredMinRx is the fastest rate this side accepts packets at.
	RequiredMinRx time.Duration
	// DetectMult is how many intervals without a packet declare the session down.
	DetectMult uint8
}

// DefaultTimers are 300 ms x 3, as FRR and MetalLB.
var DefaultTimers = Timers{DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond, DetectMult: 3}

// MinInterval is the fastest interval a session may be configured with.
const MinInterval = 50 * time.Millisecond

// slowTx is the transmit interval floor while a session is not Up (RFC 5880 section 6.8.3).
const slowTx = time.Second

// Key identifies a session: one per peer address and interface.
type Key struct {
	Peer      netip.Addr
	Interface string
}

func (k Key) String() string {
	if k.Interface == "" {
		return k.Peer.String()
	}
	return k.Peer.String() + "%" + k.Interface
}

// Transition is a state change of a session.
type Transition struct {
	Key      Key
	From, To State
	// Diag is the local diagnostic: why this side changed state.
	Diag Diag
	// RemoteState and RemoteDiag are what the peer last sent: AdminDown when it was shut down
	// deliberately, and its own reason.
	RemoteState State
	RemoteDiag  Diag
	At          time.Time
}

// Counters of one session.
type Counters struct {
	PacketsSent, PacketsReceived, Transitions uint64
	// Detections counts detection time expiries: the peer went silent while Init or Up.
	Detections uint64
}

// session is the RFC 5880 state of one session; pure, driven by packets and the clock given to
// it, so that it is tested transition by transition on a fake clock.
type session struct {
	key    Key
	timers Timers
	jitter func() float64 // uniform in [0,1)

	state, remoteState    State
	localDisc, remoteDisc uint32
	localDiag, remoteDiag Diag

	// Advertised intervals, microseconds.
	desiredMinTx, requiredMinRx uint32
	// Values in force while a Poll Sequence is outstanding: an increased Desired Min TX and a
	// reduced Required Min RX only take effect when the peer acknowledges with Final.
	txBasis, rxBasis uint32
	polling          bool
	owesFinal        bool

	remoteDesiredMinTx, remoteMinRx uint32
	remoteMult                      uint8
	remoteDemand                    bool

	nextTx   time.Time
	detectAt time.Time // zero while no detection timer runs
	// removeAt is set while a removed session still announces AdminDown.
	removeAt time.Time

	counters     Counters
	lastChange   time.Time
	lastReceived time.Time
}

func usec(d time.Duration) uint32 { return uint32(d / time.Microsecond) }

func newSession(key Key, t Timers, disc uint32, now time.Time, jitter func() float64) *session {
	s := &session{
		key: key, timers: t, jitter: jitter,
		state: Down, remoteState: Down, localDisc: disc,
		desiredMinTx:  max(usec(t.DesiredMinTx), usec(slowTx)),
		requiredMinRx: usec(t.RequiredMinRx),
		remoteMinRx:   1, // RFC 5880 section 6.8.1 initial value
		nextTx:        now,
		lastChange:    now,
	}
	s.txBasis, s.rxBasis = s.desiredMinTx, s.requiredMinRx
	return s
}

// txInterval is the negotiated transmit interval before jitter.
func (s *session) txInterval() time.Duration {
	return time.Duration(max(s.txBasis, s.remoteMinRx)) * time.Microsecond
}

// DetectionTime is how long this side waits for a packet before declaring the session down
// (asynchronous mode: the peer's multiplier times the agreed interval it sends at).
func (s *session) detectionTime() time.Duration {
	return time.Duration(s.remoteMult) * time.Duration(max(s.rxBasis, s.remoteDesiredMinTx)) * time.Microsecond
}

// scheduleTx sets the next periodic transmission: the interval reduced by 0-25% of jitter, or by
// 10-25% when the multiplier is 1 (RFC 5880 section 6.8.7).
func (s *session) scheduleTx(now time.Time) {
	f := 0.75 + 0.25*s.jitter()
	if s.timers.DetectMult == 1 {
		f = 0.75 + 0.15*s.jitter()
	}
	s.nextTx = now.Add(time.Duration(float64(s.txInterval()) * f))
}

// setDesiredMinTx changes the advertised Desired Min TX; an increase while Up is used only after
// the Poll Sequence it starts ends.
func (s *session) setDesiredMinTx(v uint32) {
	if v == s.desiredMinTx {
		return
	}
	if s.state != Up || v < s.txBasis {
		s.txBasis = v
	}
	s.desiredMinTx = v
	s.startPoll()
}

// setRequiredMinRx changes the advertised Required Min RX; a reduction while Up is used for
// detection only after the Poll Sequence it starts ends.
func (s *session) setRequiredMinRx(v uint32) {
	if v == s.requiredMinRx {
		return
	}
	if s.state != Up || v > s.rxBasis {
		s.rxBasis = v
	}
	s.requiredMinRx = v
	s.startPoll()
}

func (s *session) startPoll() {
	if s.state == Up {
		s.polling = true
	} else { // nothing to negotiate with a peer that is not Up: values apply at once
		s.txBasis, s.rxBasis = s.desiredMinTx, s.requiredMinRx
	}
}

// reconfigure applies new timers to a live session, keeping its state and discriminators.
func (s *session) reconfigure(t Timers) {
	s.timers = t
	if s.state == Up {
		s.setDesiredMinTx(usec(t.DesiredMinTx))
	} else { // the one-second floor of a session not Up still holds
		s.setDesiredMinTx(max(usec(t.DesiredMinTx), usec(slowTx)))
	}
	s.setRequiredMinRx(usec(t.RequiredMinRx))
}

func (s *session) setState(to State, diag Diag, now time.Time) *Transition {
	tr := &Transition{Key: s.key, From: s.state, To: to, Diag: diag, RemoteState: s.remoteState, RemoteDiag: s.remoteDiag, At: now}
	s.state, s.localDiag = to, diag
	s.counters.Transitions++
	s.lastChange = now
	if to == Up {
		s.setDesiredMinTx(usec(s.timers.DesiredMinTx))
	} else {
		// Not Up: at least one second between packets, no Poll Sequence outstanding.
		s.polling = false
		s.desiredMinTx = max(usec(s.timers.DesiredMinTx), usec(slowTx))
		s.txBasis, s.rxBasis = s.desiredMinTx, s.requiredMinRx
	}
	s.nextTx = now // announce the change at once
	return tr
}

// receive processes a packet already validated and demultiplexed to this session (RFC 5880
// section 6.8.6, from "If the Final (F) bit is set"). It returns the state change, if any.
func (s *session) receive(p *layers.BFD, now time.Time) *Transition {
	if s.state == AdminDown {
		return nil
	}
	s.counters.PacketsReceived++
	s.lastReceived = now
	if p.Final && s.polling {
		s.polling = false
		s.txBasis, s.rxBasis = s.desiredMinTx, s.requiredMinRx
	}
	oldTx := s.txInterval()
	s.remoteDisc = uint32(p.MyDiscriminator)
	s.remoteState = State(p.State)
	s.remoteDemand = p.Demand
	s.remoteMinRx = uint32(p.RequiredMinRxInterval)
	s.remoteDesiredMinTx = uint32(p.DesiredMinTxInterval)
	s.remoteMult = uint8(p.DetectMultiplier)
	s.remoteDiag = Diag(p.Diagnostic)
	if p.Poll {
		s.owesFinal = true
	}
	if s.txInterval() < oldTx && now.Add(s.txInterval()).Before(s.nextTx) {
		s.scheduleTx(now) // the peer accepts faster packets: do not wait out the old interval
	}

	var tr *Transition
	switch {
	case s.remoteState == AdminDown:
		if s.state != Down {
			tr = s.setState(Down, DiagNeighborSignalDown, now)
		}
	case s.state == Down:
		if s.remoteState == Down {
			tr = s.setState(Init, DiagNone, now)
		} else if s.remoteState == Init {
			tr = s.setState(Up, DiagNone, now)
		}
	case s.state == Init:
		if s.remoteState == Init || s.remoteState == Up {
			tr = s.setState(Up, DiagNone, now)
		}
	case s.state == Up:
		if s.remoteState == Down {
			tr = s.setState(Down, DiagNeighborSignalDown, now)
		}
	}
	if (s.state == Init || s.state == Up) && s.remoteState != AdminDown {
		s.detectAt = now.Add(s.detectionTime())
	} else {
		s.detectAt = time.Time{}
	}
	return tr
}

// expire declares the session down when the detection time passed without a packet.
func (s *session) expire(now time.Time) *Transition {
	if s.detectAt.IsZero() || now.Before(s.detectAt) {
		return nil
	}
	s.detectAt = time.Time{}
	s.remoteDisc = 0 // RFC 5880 section 6.8.1
	s.remoteState = Down
	s.counters.Detections++
	return s.setState(Down, DiagTimeExpired, now)
}

// shouldSendPeriodic says whether a periodic packet is due now, and reschedules the next one.
// No periodic packets go out while the peer asks for none (Required Min RX 0) or runs demand
// mode with both sides Up (RFC 5880 section 6.8.7).
func (s *session) shouldSendPeriodic(now time.Time) bool {
	if now.Before(s.nextTx) {
		return false
	}
	s.scheduleTx(now)
	if s.remoteMinRx == 0 {
		return false
	}
	return !(s.remoteDemand && s.state == Up && s.remoteState == Up)
}

// packet is the next control packet; final answers a Poll (and then carries no Poll itself).
func (s *session) packet(final bool) layers.BFD {
	return layers.BFD{
		Version:               1,
		Diagnostic:            layers.BFDDiagnostic(s.localDiag),
		State:                 layers.BFDState(s.state),
		Poll:                  s.polling && !final,
		Final:                 final,
		DetectMultiplier:      layers.BFDDetectMultiplier(s.timers.DetectMult),
		MyDiscriminator:       layers.BFDDiscriminator(s.localDisc),
		YourDiscriminator:     layers.BFDDiscriminator(s.remoteDisc),
		DesiredMinTxInterval:  layers.BFDTimeInterval(s.desiredMinTx),
		RequiredMinRxInterval: layers.BFDTimeInterval(s.requiredMinRx),
	}
}

// adminDown starts the removal of a session: it announces AdminDown for a detection time of
// the peer, so that the peer sees a deliberate shutdown rather than a failure.
func (s *session) adminDown(now time.Time) *Transition {
	tr := s.setState(AdminDown, DiagAdminDown, now)
	s.detectAt = time.Time{}
	s.removeAt = now.Add(time.Duration(s.timers.DetectMult) * s.txInterval())
	return tr
}

// next is the earliest time this session needs attention.
func (s *session) next() time.Time {
	t := s.nextTx
	if !s.detectAt.IsZero() && s.detectAt.Before(t) {
		t = s.detectAt
	}
	if !s.removeAt.IsZero() && s.removeAt.Before(t) {
		t = s.removeAt
	}
	return t
}

// dropReason validates a decoded packet against RFC 5880 section 6.8.6, before demultiplexing.
// It returns dropNone for a packet to process.
func dropReason(p *layers.BFD) dropCause {
	switch {
	case p.Version != 1:
		return dropVersion
	case p.AuthPresent:
		return dropAuth // no authentication is configured: the RFC says discard
	case p.DetectMultiplier == 0:
		return dropDetectMult
	case p.Multipoint:
		return dropMultipoint
	case p.MyDiscriminator == 0:
		return dropMyDisc
	case p.YourDiscriminator == 0 && p.State != layers.BFDStateDown && p.State != layers.BFDStateAdminDown:
		return dropYourDisc
	}
	return dropNone
}
