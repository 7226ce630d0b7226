package reachability

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of egressd_reachability_connections_refused_total.
const (
	overPeer  = "per_peer"
	overTotal = "total"
)

// maxLife closes any connection, whatever gRPC thinks of it: a backstop to maxAge, whose timer
// gRPC stops once it has drained an idle connection, which an RPC opened meanwhile and never
// finished would otherwise keep open for good.
const maxLife = 2 * maxAge

// limitListener caps the connections open at once, per peer address and in all, so that one
// address cannot take every slot, and a crowd cannot exhaust the agent's memory and file
// descriptors. A connection over a cap is reset as soon as it is accepted (gRPC never sees it)
// and counted. Only open connections count, not connection rates; the leader's connect probes
// (every 150 ms, reset by the leader right after the handshake) send nothing and never reach
// it (deferAccept), so they never crowd out its health connection. Peers are counted by address, not
// by IPv6 prefix: pods cannot send from addresses not theirs (anti-spoofing), and a prefix
// would let the pods next to the leader crowd it out.
type limitListener struct {
	net.Listener
	perPeer, total int
	life           time.Duration // maxLife; tests shorten it
	refused        *prometheus.CounterVec

	mu   sync.Mutex
	open map[netip.Addr]int
	n    int
}

func newLimitListener(l net.Listener, perPeer, total int, refused *prometheus.CounterVec) *limitListener {
	return &limitListener{Listener: l, perPeer: perPeer, total: total, life: maxLife, refused: refused,
		open: map[netip.Addr]int{}}
}

// Accept returns the next connection within the caps; it refuses the others itself, since an
// error would make gRPC back off from accepting.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		if reason := l.admit(peer); reason != "" {
			l.refused.WithLabelValues(reason).Inc()
			_ = c.(*net.TCPConn).SetLinger(0) // RST: no TIME_WAIT kept here for a refused peer
			_ = c.Close()
			continue
		}
		lc := &limitedConn{Conn: c}
		lc.release = sync.OnceFunc(func() { l.leave(peer) })
		lc.life = time.AfterFunc(l.life, func() { lc.release(); _ = c.Close() }) // gRPC's Close follows
		return lc, nil
	}
}

// admit counts a connection of peer in, or says which cap it exceeds.
func (l *limitListener) admit(peer netip.Addr) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open[peer] >= l.perPeer:
		return overPeer
	case l.n >= l.total:
		return overTotal
	}
	l.open[peer]++
	l.n++
	return ""
}

func (l *limitListener) leave(peer netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[peer]--; l.open[peer] == 0 {
		delete(l.open, peer) // the map holds open peers only
	}
	l.n--
}

// limitedConn gives its slot back when closed (gRPC closes every connection it ends).
type limitedConn struct {
	net.Conn
	release func()
	life    *time.Timer
}

func (c *limitedConn) Close() error {
	c.life.Stop()
	c.release()
	return c.Conn.Close()
}
