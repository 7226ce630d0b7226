package reachability

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

const (
	// DefaultPort is upstream's health-check port (OVN_EGRESSIP_HEALTHCHECK_PORT in its e2e).
	DefaultPort = 9107
	// serviceName is the grpc.health.v1 service upstream checks.
	serviceName = "Service_Egress_IP"
)

// Limits of the Server, which anything that reaches the node may call (DESIGN.md: no listener
// has unlimited streams, message sizes or connections). Its callers need little: the leader's
// Prober holds one connection and sends a Check a second, upstream's cluster-manager a Check
// every 5 s, and agents announce pods in under 1 KiB of JSON (names of at most 253 bytes, two
// addresses: nodeagent/podannounce).
const (
	maxStreams    = 16               // RPCs at once per connection (grpc: unlimited)
	maxMsgSize    = 64 << 10         // per message, either way (grpc: 4 MiB in)
	maxHeaderList = 16 << 10         // metadata of a call: a service account token fits many times (grpc: 16 MiB)
	connTimeout   = 5 * time.Second  // from accept to HTTP/2 settings exchanged (grpc: 120 s)
	maxIdle       = 30 * time.Second // without RPCs (announcers' connections), then GOAWAY
	maxAge        = 5 * time.Minute  // then GOAWAY, so no connection keeps its slot for ever
	maxAgeGrace   = 10 * time.Second // for the RPCs in flight at maxAge
	minPingEvery  = 30 * time.Second // keepalive pings more often, or with no RPC, get GOAWAY
	maxPerPeer    = 8                // open connections per peer address (see limitListener)
	// deferAccept: a connection is handed to the agent once its first data arrives, or after
	// these seconds (TCP_DEFER_ACCEPT). The leader's connect probes (a handshake every 150 ms,
	// then a reset) never send any: the kernel answers them and drops them without waking the
	// agent, which set up and tore down a gRPC transport for each (a sixth of an idle egress
	// node's CPU). Every client sends its preface at once.
	deferAccept = 5
	maxConns    = 256 // open connections in all
)

// Server serves grpc.health.v1 Check with Service_Egress_IP SERVING, on the node's address. The
// agent runs one; the leader's Prober (and upstream's cluster-manager) probe it.
type Server struct {
	addr     string
	services []func(grpc.ServiceRegistrar)
	refused  *prometheus.CounterVec

	mu   sync.Mutex
	lis  net.Listener
	grpc *grpc.Server
	done chan struct{}
}

// NewServer returns a Server for addr, host:port as net.Listen takes it (an empty host is every
// address of the node; port 0 picks a free port, see Addr), which also serves the services that
// register adds (the agents' own: nodeagent/podannounce).
func NewServer(addr string, register ...func(grpc.ServiceRegistrar)) *Server {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egressd_reachability_connections_refused_total",
		Help: "Connections to the agent's gRPC port closed at once, by the limit they exceeded (per_peer, total).",
	}, []string{"reason"})
	refused.WithLabelValues(overPeer)
	refused.WithLabelValues(overTotal)
	return &Server{addr: addr, services: register, refused: refused}
}

// Collectors are the Server's Prometheus metrics, for the caller's registry.
func (s *Server) Collectors() []prometheus.Collector { return []prometheus.Collector{s.refused} }

// checkOnly is grpc's health server with Check alone: Watch and List answer Unimplemented (from
// the embedded stub). Nobody needs them (upstream and the Prober send Check only), and Watch
// holds a stream open as long as the caller likes, under a service name grpc's server keeps
// (for good before grpc-go 1.85: grpc/grpc-go#9411). Check stores nothing: an unknown name is
// NOT_FOUND.
type checkOnly struct {
	healthpb.UnimplementedHealthServer
	health *health.Server
}

func (c checkOnly) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return c.health.Check(ctx, req)
}

// Start listens in the caller's network namespace and serves in the background. The listening
// socket is made here, synchronously: handshakes (the Prober's fast signal) are answered by
// the kernel from its queue as soon as Start returns, whatever the serving goroutine does.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lis != nil {
		return fmt.Errorf("reachability server on %s: already started", s.addr)
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, deferAccept)
		}); err != nil {
			return err
		}
		return serr
	}}
	lis, err := lc.Listen(context.Background(), "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("reachability server: %w", err)
	}
	s.lis = newLimitListener(lis, maxPerPeer, maxConns, s.refused)
	h := health.NewServer()
	h.SetServingStatus(serviceName, healthpb.HealthCheckResponse_SERVING)
	s.grpc = grpc.NewServer(
		grpc.MaxConcurrentStreams(maxStreams),
		grpc.MaxRecvMsgSize(maxMsgSize),
		grpc.MaxSendMsgSize(maxMsgSize),
		grpc.MaxHeaderListSize(maxHeaderList),
		grpc.ConnectionTimeout(connTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minPingEvery}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: maxIdle, MaxConnectionAge: maxAge, MaxConnectionAgeGrace: maxAgeGrace,
		}),
	)
	healthpb.RegisterHealthServer(s.grpc, checkOnly{health: h})
	for _, register := range s.services {
		register(s.grpc)
	}
	s.done = make(chan struct{})
	go func(g *grpc.Server, lis net.Listener, done chan struct{}) {
		defer close(done)
		_ = g.Serve(lis) // returns when stopped; a failed Accept also ends it: Stop still works
	}(s.grpc, s.lis, s.done)
	return nil
}

// Addr is the address the server listens on (the chosen port when started with port 0); the
// zero AddrPort when it is not started.
func (s *Server) Addr() netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lis == nil {
		return netip.AddrPort{}
	}
	return s.lis.Addr().(*net.TCPAddr).AddrPort()
}

// Stop closes the listener and every connection, and waits for the serving goroutine. It may be
// called again, and Start after it.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lis == nil {
		return
	}
	s.grpc.Stop() // not GracefulStop: a caller's stalled RPC must not hold up the agent
	<-s.done
	s.lis, s.grpc, s.done = nil, nil, nil
}
