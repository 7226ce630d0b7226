package reachability

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// dialFunc opens a TCP connection to addr; tests inject one (fake networks, network namespaces).
type dialFunc func(ctx context.Context, addr netip.AddrPort) (net.Conn, error)

// userTimeout bounds how long sent data may stay unacknowledged before the kernel drops the
// connection: a health connection whose peer vanished is redialled within seconds, instead of
// stalling in TCP's exponential retransmit backoff once the peer is back.
const userTimeout = 2 * time.Second

// dialTCP is the production dialer.
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

// connect does one layer-1 probe: a handshake within timeout, then an abortive close (RST),
// which leaves no TIME_WAIT on the leader and a connection the agent drops on its first read.
func connect(ctx context.Context, dial dialFunc, addr netip.AddrPort, timeout time.Duration) (outcome, time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	c, err := dial(ctx, addr)
	rtt := time.Since(start)
	if err != nil {
		return classify(err), rtt
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
	return answered, rtt
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
	resp, err := h.client.Check(ctx, &healthpb.HealthCheckRequest{Service: ServiceName})
	rtt := time.Since(start)
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return notServing, rtt
	}
	return serving, rtt
}

func (h *healthClient) close() { _ = h.conn.Close() }
