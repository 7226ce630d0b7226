package reachability

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// healthFrom is a health client of s whose connections leave from the address from.
func healthFrom(t *testing.T, s *Server, from string) healthpb.HealthClient {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := grpc.NewClient("passthrough:///"+s.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func check(c healthpb.HealthClient, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return resp.GetStatus(), err
}

// watch opens a Watch of service and returns the error of its first answer.
func watch(c healthpb.HealthClient, service string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel() // ends the stream, as a caller that goes away does
	stream, err := c.Watch(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return err
	}
	_, err = stream.Recv()
	return err
}

// The health service answers Check only, as upstream's does: Service_Egress_IP is SERVING, an
// unknown service NOT_FOUND, Watch and List are not implemented.
func TestServerHealthCheckOnly(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	c := healthFrom(t, s, "127.0.0.1")
	if st, err := check(c, serviceName); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Check(%s) = %v, %v; want SERVING", serviceName, st, err)
	}
	if _, err := check(c, "other"); status.Code(err) != codes.NotFound {
		t.Errorf("Check(other): %v, want NotFound", err)
	}
	if err := watch(c, serviceName); status.Code(err) != codes.Unimplemented {
		t.Errorf("Watch(%s): %v, want Unimplemented", serviceName, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.List(ctx, &healthpb.HealthListRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("List: %v, want Unimplemented", err)
	}
}

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC() // the second empties the pools the first left to be collected
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// Service names a caller makes up are not kept: 500 Watches of distinct 1 MiB names (each
// refused for its size), then 500 Checks of distinct names just under the message limit
// (NOT_FOUND), leave the heap as it was. Each would keep 500 MiB and 30 MiB if names were kept.
func TestServerKeepsNoServiceNames(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	c := healthFrom(t, s, "127.0.0.1")
	if _, err := check(c, serviceName); err != nil { // connection and buffers up before measuring
		t.Fatal(err)
	}
	for _, tc := range []struct {
		call func(healthpb.HealthClient, string) error
		what string
		size int
		code codes.Code
	}{
		{watch, "Watch", 1 << 20, codes.ResourceExhausted},
		{func(c healthpb.HealthClient, n string) error { _, err := check(c, n); return err }, "Check", maxMsgSize - 4<<10, codes.NotFound},
	} {
		pad := strings.Repeat("x", tc.size-8)
		before := heapInUse()
		for i := range 500 {
			if err := tc.call(c, fmt.Sprintf("%08d", i)+pad); status.Code(err) != tc.code {
				t.Fatalf("%s %d of a %d KiB name: %v, want %v", tc.what, i, tc.size>>10, err, tc.code)
			}
		}
		after := heapInUse()
		growth := int64(after) - int64(before)
		t.Logf("500 %s calls of distinct %d KiB names: heap in use %.1f -> %.1f MiB (%+.1f MiB)",
			tc.what, tc.size>>10, float64(before)/(1<<20), float64(after)/(1<<20), float64(growth)/(1<<20))
		if growth > 8<<20 {
			t.Errorf("%s: the heap grew by %.1f MiB: service names are kept", tc.what, float64(growth)/(1<<20))
		}
	}
}

// refusedCount is the number of connections refused for reason.
func refusedCount(s *Server, reason string) float64 {
	return testutil.ToFloat64(s.refused.WithLabelValues(reason))
}

// dialRefused connects from the address from and tells whether the server closed the
// connection at once (reset or EOF before anything was sent) rather than keeping it.
func dialRefused(t *testing.T, to netip.AddrPort, from string) bool {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", to.String())
	if errors.Is(err, syscall.ECONNRESET) { // reset before the dial returned
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The first byte of a client's preface: the kernel hands a connection to the server once it
	// sent something (deferAccept).
	if _, err := c.Write([]byte("P")); err != nil {
		return true
	}
	_ = c.SetReadDeadline(time.Now().Add(connTimeout / 2)) // gRPC waits connTimeout for the rest
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// The server holds 8 connections of one peer address: the 9th is closed at once and counted,
// while another address still connects; once one of the 8 is closed, the peer connects again.
func TestServerConnectionsPerPeer(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	var conns []*grpc.ClientConn
	for range maxPerPeer {
		conn, err := grpc.NewClient("passthrough:///"+s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if st, err := check(healthpb.NewHealthClient(conn), serviceName); err != nil || st != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("connection %d: %v, %v", len(conns)+1, st, err)
		}
		conns = append(conns, conn)
	}
	if !dialRefused(t, s.Addr(), "127.0.0.1") {
		t.Fatalf("a connection over %d from one address was kept", maxPerPeer)
	}
	if n := refusedCount(s, overPeer); n != 1 {
		t.Errorf("refused per peer: %v, want 1", n)
	}
	if st, err := check(healthFrom(t, s, "127.0.0.2"), serviceName); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("from a second address: %v, %v; want SERVING", st, err)
	}
	_ = conns[0].Close()
	waitFor(t, 5*time.Second, "a connection once one of 8 closed", func() bool { return !dialRefused(t, s.Addr(), "127.0.0.1") })
	if n := refusedCount(s, overTotal); n != 0 {
		t.Errorf("refused over the total: %v, want 0", n)
	}
}

// Connections that send nothing, as the leader's connect probes, take no slot: twice as many as
// a peer may hold leave it a health connection, and none is counted refused.
func TestServerSilentConnectionsTakeNoSlot(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	for range 2 * maxPerPeer {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	if st, err := check(healthFrom(t, s, "127.0.0.1"), serviceName); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("a health check beside %d silent connections of its address: %v, %v; want SERVING", 2*maxPerPeer, st, err)
	}
	if n := refusedCount(s, overPeer); n != 0 {
		t.Errorf("refused per peer: %v, want 0", n)
	}
}

// The listener's caps on its own: per peer, in all, and the lifetime backstop; a closed
// connection gives its slot back.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "refused"}, []string{"reason"})
	l := newLimitListener(inner, 2, 3, refused)
	defer l.Close()
	accepted := make(chan net.Conn)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	to := inner.Addr().(*net.TCPAddr).AddrPort()
	admit := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", to.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		select {
		case sc := <-accepted:
			return sc
		case <-time.After(5 * time.Second):
			t.Fatalf("connection from %s not accepted", from)
			return nil
		}
	}
	a1 := admit("127.0.0.1")
	admit("127.0.0.1")
	if !dialRefused(t, to, "127.0.0.1") || testutil.ToFloat64(refused.WithLabelValues(overPeer)) != 1 {
		t.Error("a third connection from one address was not refused per peer")
	}
	admit("127.0.0.2")
	if !dialRefused(t, to, "127.0.0.3") || testutil.ToFloat64(refused.WithLabelValues(overTotal)) != 1 {
		t.Error("a fourth connection in all was not refused")
	}
	_ = a1.Close()
	_ = a1.Close() // gives its slot back once only
	admit("127.0.0.3")
	if !dialRefused(t, to, "127.0.0.4") {
		t.Error("a connection over the total was kept after one closed twice")
	}

}

// A connection is closed at the end of its life whatever gRPC does (the backstop to maxAge),
// and gives its slot back.
func TestLimitListenerLifetime(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(inner, 1, 1, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "refused"}, []string{"reason"}))
	l.life = 50 * time.Millisecond
	defer l.Close()
	go func() {
		for {
			if _, err := l.Accept(); err != nil { // accepted and never closed here, as by a stuck server
				return
			}
		}
	}()
	to := inner.Addr().(*net.TCPAddr).AddrPort()
	if !dialRefused(t, to, "127.0.0.1") {
		t.Fatal("connection not closed at the end of its life")
	}
	waitFor(t, 5*time.Second, "the slot given back", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.n == 0 && len(l.open) == 0
	})
}

// The leader's probes are never refused: its connect probes (here every 10 ms, 15 times the
// production rate) leave at once, so the caps never reach its health connection, and the node is
// judged reachable.
func TestLoopbackProbesWithinLimits(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	p := newProber(t, Config{Interval: 10 * time.Millisecond, healthEvery: 200 * time.Millisecond})
	p.Set(map[string]netip.AddrPort{"n": s.Addr()})
	waitFor(t, 10*time.Second, "probes and Checks", func() bool {
		return count(p, "connect", answered) >= 20*maxPerPeer && servingSeen(p) >= 5
	})
	if n, m := refusedCount(s, overPeer), refusedCount(s, overTotal); n != 0 || m != 0 {
		t.Errorf("%v connections refused per peer, %v in all; want none", n, m)
	}
	if !p.Reachable("n") {
		t.Error("a served node judged unreachable")
	}
}
