package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/egressd/egressd/nodeagent"
)

// The runtime profiles are served on their own address alone, and only with --profiling.
func TestServeProfiling(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, profiling := range []bool{false, true} {
		eps := endpoints{metrics: freeAddr(t), health: freeAddr(t)}
		if profiling {
			eps.profiling = freeAddr(t)
		}
		servers, err := serve(eps, nodeagent.NewMetrics().Registry, func() bool { return false }, log)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{eps.metrics: http.StatusNotFound, eps.health: http.StatusNotFound}
		if profiling {
			want[eps.profiling] = http.StatusOK
		}
		for addr, code := range want {
			resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != code {
				t.Errorf("profiling=%t: /debug/pprof/goroutine on %s: %s, want %d", profiling, addr, resp.Status, code)
			}
		}
		for _, s := range servers {
			s.Close()
		}
	}
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// With the guard (--metrics-auth, the default), /metrics and the profiles refuse a caller
// without a token while the health endpoints stay open to the kubelet's probes.
func TestServeGuardsMetrics(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	eps := endpoints{metrics: freeAddr(t), health: freeAddr(t), profiling: freeAddr(t), guard: metricsGuard(true, fake.NewClientset(), log)}
	servers, err := serve(eps, nodeagent.NewMetrics().Registry, func() bool { return true }, log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	for url, want := range map[string]int{
		"http://" + eps.metrics + "/metrics":                         http.StatusUnauthorized,
		"http://" + eps.profiling + "/debug/pprof/goroutine?debug=1": http.StatusUnauthorized,
		"http://" + eps.health + "/healthz":                          http.StatusOK,
		"http://" + eps.health + "/readyz":                           http.StatusOK,
	} {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without a token: %s, want %d", url, resp.Status, want)
		}
	}
}
