package reachability

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// dialFunc opens the health connection to addr; tests inject fake networks and namespaces.
type dialFunc func(ctx context.Context, addr netip.AddrPort) (net.Conn, error)

// userTimeout bounds how long sent data may stay unacknowledged before the kernel drops the
// connection: a health connection whose peer vanished is redialled within seconds, instead of
// stalling in TCP's exponential retransmit backoff once the peer is back.
const userTimeout = 2 * time.Second

// dialTCP is the production dialer of health connections.
func dialTCP(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(userTimeout.Milliseconds()))
		})
		return errors.Join(err, serr)
	}}
	return d.DialContext(ctx, "tcp", addr.String())
}

// probeFunc does one layer-1 probe of addr within timeout; tests inject fakes and namespaces.
type probeFunc func(ctx context.Context, addr netip.AddrPort, timeout time.Duration) (outcome, time.Duration)

// Linux TCP states (include/net/tcp_states.h) that tell a handshake in flight from one done.
const (
	tcpSynSent = 2
	tcpClose   = 7
)

// connectProbe does one layer-1 probe: a non-blocking connect, a wait for it to finish or for
// timeout, then an abortive close (RST: no TIME_WAIT on the leader; the agent drops the
// connection on its first read). The outcome is read from the kernel's socket state when the
// wait ends, not from whichever of "writable" and "deadline" the Go runtime noticed first: a
// leader whose own CPU is starved wakes late, and a handshake its kernel completed meanwhile
// is an answer. (Probing with net.Dialer instead, a leader spinning at 10% CPU saw two thirds
// of its probes time out and declared a healthy node unreachable: the starved-leader test.)
// The RTT of an answer is the kernel's handshake measurement, for the same reason.
func connectProbe(ctx context.Context, addr netip.AddrPort, timeout time.Duration) (outcome, time.Duration) {
	start := time.Now()
	family, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16()})
	if addr.Addr().Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return localError, 0
	}
	f := os.NewFile(uintptr(fd), "reachability-probe") // owns fd; non-blocking, so runtime-polled
	defer f.Close()
	if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}); err != nil {
		return localError, 0
	}
	if err := unix.Connect(fd, sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return classify(err), time.Since(start)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return localError, 0
	}
	_ = f.SetWriteDeadline(start.Add(timeout))
	defer context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Now()) })()
	_ = rc.Write(func(uintptr) bool { // waits while false: until writable or the deadline
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		return err != nil || info.State != tcpSynSent
	})
	if ctx.Err() != nil {
		return localError, time.Since(start)
	}
	info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	switch {
	case err != nil:
		return localError, time.Since(start)
	case info.State == tcpSynSent:
		return silent, time.Since(start)
	case info.State != tcpClose: // established, or already closed by the peer after it
		return answered, time.Duration(info.Rtt) * time.Microsecond
	}
	serr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil || serr == 0 {
		return localError, time.Since(start)
	}
	return classify(syscall.Errno(serr)), time.Since(start)
}

// classify maps a failed connect to an outcome. Only errors that say "no answer from there"
// are silent: anything else is the leader's own trouble and must not fail nodes over.
func classify(err error) outcome {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return refused
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout(),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.EHOSTDOWN), errors.Is(err, syscall.ETIMEDOUT):
		return silent
	default:
		return localError
	}
}

// healthClient keeps one gRPC connection to a target's Server for layer-2 Checks.
type healthClient struct {
	conn   *grpc.ClientConn
	client healthpb.HealthClient
}

// newHealthClient makes the connection (lazily: nothing is dialled before the first Check).
// The reconnect backoff is capped at every: a restarted agent is seen at the next Check.
func newHealthClient(dial dialFunc, addr netip.AddrPort, every time.Duration) (*healthClient, error) {
	conn, err := grpc.NewClient("passthrough:///"+addr.String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dial(ctx, addr) }),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: every / 10, Multiplier: 1.6, Jitter: 0.2, MaxDelay: every},
			MinConnectTimeout: every,
		}))
	if err != nil {
		return nil, err
	}
	return &healthClient{conn: conn, client: healthpb.NewHealthClient(conn)}, nil
}

// check sends one Check with timeout as deadline.
func (h *healthClient) check(ctx context.Context, timeout time.Duration) (outcome, time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	resp, err := h.client.Check(ctx, &healthpb.HealthCheckRequest{Service: serviceName})
	rtt := time.Since(start)
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return notServing, rtt
	}
	return serving, rtt
}

func (h *healthClient) close() { _ = h.conn.Close() }
