package reachability

import "time"

// outcome is what one probe learnt about a target.
type outcome int

const (
	answered   outcome = iota // handshake completed: kernel and listening socket alive
	refused                   // RST: kernel alive, agent not listening (restarting)
	silent                    // no answer in time, or host/network unreachable
	localError                // the leader's own failure: says nothing about the target
	serving                   // health Check answered SERVING
	notServing                // health Check failed or answered anything but SERVING
)

func (o outcome) String() string {
	return [...]string{"answered", "refused", "silent", "error", "serving", "not_serving"}[o]
}

// reason says why a target was declared unreachable (a metric label).
type reason string

const (
	hostSilent  reason = "host_silent"  // Misses silent connects in a row
	agentAbsent reason = "agent_absent" // no SERVING for the grace period
)

// verdict is the state machine of one target, pure: every input carries its time, so it is
// tested without clocks or sockets.
type verdict struct {
	misses int           // silent connects in a row that make a node unreachable, and answers that make it reachable again
	grace  time.Duration // how long the agent may go without answering SERVING

	reachable   bool
	silentRun   int       // consecutive silent connects
	answerRun   int       // consecutive answered or refused connects
	lastServing time.Time // last SERVING; the time the target was added until the first
	downAt      time.Time // when it was last declared unreachable
	why         reason    // why, when unreachable
}

// newVerdict starts reachable with a full grace period (see the package doc).
func newVerdict(misses int, grace time.Duration, now time.Time) *verdict {
	return &verdict{misses: misses, grace: grace, reachable: true, lastServing: now}
}

// record takes one probe's outcome at now and reports whether reachability changed.
func (v *verdict) record(now time.Time, o outcome) bool {
	switch o {
	case answered, refused:
		v.silentRun = 0
		v.answerRun++
	case silent:
		v.silentRun++
		v.answerRun = 0
	case serving:
		v.lastServing = now
	}
	return v.judge(now)
}

func (v *verdict) judge(now time.Time) bool {
	if v.reachable {
		switch {
		case v.silentRun >= v.misses:
			v.why = hostSilent
		case now.Sub(v.lastServing) > v.grace:
			v.why = agentAbsent
		default:
			return false
		}
		v.reachable, v.downAt = false, now
		return true
	}
	if v.silentRun == 0 && v.answerRun >= v.misses && v.lastServing.After(v.downAt) {
		v.reachable, v.why = true, ""
		return true
	}
	return false
}
