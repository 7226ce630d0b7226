package reachability

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

const (
	// DefaultPort is upstream's health-check port (OVN_EGRESSIP_HEALTHCHECK_PORT in its e2e).
	DefaultPort = 9107
	// serviceName is the grpc.health.v1 service upstream checks.
	serviceName = "Service_Egress_IP"
)

// Server serves grpc.health.v1 with Service_Egress_IP SERVING, on the node's address. The agent
// runs one; the leader's Prober (and upstream's cluster-manager) probe it.
type Server struct {
	addr     string
	services []func(grpc.ServiceRegistrar)

	mu     sync.Mutex
	lis    net.Listener
	grpc   *grpc.Server
	health *health.Server
	done   chan struct{}
}

// NewServer returns a Server for addr, host:port as net.Listen takes it (an empty host is every
// address of the node; port 0 picks a free port, see Addr), which also serves the services that
// register adds (the agents' own: nodeagent/podannounce).
func NewServer(addr string, register ...func(grpc.ServiceRegistrar)) *Server {
	return &Server{addr: addr, services: register}
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
	lis, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("reachability server: %w", err)
	}
	s.lis = lis
	s.health = health.NewServer()
	s.health.SetServingStatus(serviceName, healthpb.HealthCheckResponse_SERVING)
	s.grpc = grpc.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	for _, register := range s.services {
		register(s.grpc)
	}
	s.done = make(chan struct{})
	go func(g *grpc.Server, done chan struct{}) {
		defer close(done)
		_ = g.Serve(lis) // returns when stopped; a failed Accept also ends it: Stop still works
	}(s.grpc, s.done)
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

// Stop says NOT_SERVING to watchers, closes the listener and every connection, and waits for
// the serving goroutine. It may be called again, and Start after it.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lis == nil {
		return
	}
	s.health.Shutdown()
	s.grpc.Stop() // not GracefulStop: Watch streams never end on their own
	<-s.done
	s.lis, s.grpc, s.health, s.done = nil, nil, nil, nil
}
