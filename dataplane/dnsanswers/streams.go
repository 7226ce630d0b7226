package dnsanswers

import (
	"encoding/binary"
	"sync"
	"time"
)

// streams gathers the DNS messages of TCP connections (each after its 2-byte length) that span
// segments: per connection, the bytes of the message under way and the sequence number expected
// next. The queue hands a connection's segments in the order they came; after a retransmission
// or a gap, the connection's answers pass unread (where a message starts is unknown then). Bounded: maxStreams connections with
// a message under way, the oldest dropped first, none kept past streamIdle.
type streams struct {
	mu     sync.Mutex
	byFlow map[flowKey]*stream
}

// flowKey is a connection as the answer's packets carry it: addresses, then ports.
type flowKey string

type stream struct {
	next uint32 // the sequence number of the next byte
	buf  []byte // of the message under way, from its length
	last time.Time
	lost bool // a gap was seen: no message is read on this connection any more
}

const (
	maxStreams = 256
	streamIdle = 10 * time.Second
	maxMessage = 2 + 65535
)

// add takes a segment's payload and returns the messages it completes.
func (s *streams) add(key flowKey, seq uint32, payload []byte, now time.Time) [][]byte {
	if len(payload) == 0 {
		return nil // a handshake, or an ACK
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byFlow == nil {
		s.byFlow = map[flowKey]*stream{}
	}
	st := s.byFlow[key]
	if st != nil && now.Sub(st.last) > streamIdle {
		st = nil
	}
	if st != nil && (st.lost || st.next != seq) {
		// A gap or a retransmission: where the next message starts is unknown now, so the
		// connection's answers pass unread until it has been idle a while.
		st.buf, st.lost, st.next, st.last = nil, true, seq+uint32(len(payload)), now
		return nil
	}
	if st == nil {
		st = &stream{}
	}
	st.buf, st.next, st.last = append(st.buf, payload...), seq+uint32(len(payload)), now
	var out [][]byte
	for len(st.buf) >= 2 {
		n := 2 + int(binary.BigEndian.Uint16(st.buf))
		if len(st.buf) < n {
			break
		}
		out = append(out, st.buf[2:n])
		st.buf = st.buf[n:]
	}
	if len(st.buf) == 0 || len(st.buf) > maxMessage {
		delete(s.byFlow, key)
		return out
	}
	if _, ok := s.byFlow[key]; !ok {
		s.evict(now)
		s.byFlow[key] = st
	}
	return out
}

// evict makes room for one more connection: those idle too long go, then the oldest. s.mu held.
func (s *streams) evict(now time.Time) {
	var oldest flowKey
	for k, st := range s.byFlow {
		if now.Sub(st.last) > streamIdle {
			delete(s.byFlow, k)
		} else if oldest == "" || st.last.Before(s.byFlow[oldest].last) {
			oldest = k
		}
	}
	if len(s.byFlow) >= maxStreams {
		delete(s.byFlow, oldest)
	}
}
