package watchers

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// apiServer is a RoundTripper playing an API server that refuses connections until up.
type apiServer struct {
	up     atomic.Bool
	mu     sync.Mutex
	counts map[string]int // requests by path
}

func (a *apiServer) RoundTrip(req *http.Request) (*http.Response, error) {
	a.mu.Lock()
	a.counts[req.Method+" "+req.URL.Path]++
	a.mu.Unlock()
	if !a.up.Load() {
		return nil, errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")
	}
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Body: io.NopCloser(strings.NewReader("ok"))}, nil
}

func (a *apiServer) count(what string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.counts[what]
}

// While the API server is away, the informers' reads wait (one prober knocks, not every read),
// and all go on within a probe's interval of it coming back; writes fail at once as they come;
// a read whose request ends stops waiting.
func TestReadsWaitForTheAPIServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &apiServer{counts: map[string]int{}}
		rt := &retryingReads{next: api, log: slog.New(slog.DiscardHandler)}
		get := func(ctx context.Context, path string) (*http.Response, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://10.0.0.1:6443"+path, nil)
			return rt.RoundTrip(req)
		}
		var wg sync.WaitGroup
		var done atomic.Int32
		var back time.Time
		var latest atomic.Int64 // when the last read returned, as nanoseconds since back
		for _, path := range []string{"/api/v1/pods", "/api/v1/nodes", "/apis/k8s.ovn.org/v1/egressfirewalls"} {
			wg.Go(func() {
				resp, err := get(context.Background(), path)
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Errorf("GET %s: %v", path, err)
					return
				}
				done.Add(1)
				latest.Store(int64(time.Since(back)))
			})
		}
		ctx, cancel := context.WithCancel(context.Background())
		wg.Go(func() {
			if _, err := get(ctx, "/api/v1/services"); !errors.Is(err, context.Canceled) {
				t.Errorf("a read whose request ended: %v, want its context's error", err)
			}
		})
		post, _ := http.NewRequest(http.MethodPost, "https://10.0.0.1:6443/api/v1/namespaces/a/events", strings.NewReader("{}"))
		if _, err := rt.RoundTrip(post); err == nil {
			t.Error("a write while the API server is away succeeded")
		}

		time.Sleep(2 * time.Minute) // the outage
		synctest.Wait()
		if n := done.Load(); n != 0 {
			t.Fatalf("%d reads returned while the API server was away", n)
		}
		// One prober for the client, every retryMax at most: about 40 in two minutes, where
		// each read's own retries would knock three times as often.
		if n := api.count("GET /readyz"); n < 20 || n > 2*int(2*time.Minute/retryMax)+5 {
			t.Errorf("%d probes in two minutes", n)
		}
		if n := api.count("GET /api/v1/pods"); n != 1 {
			t.Errorf("the waiting read was sent %d times while the API server was away, want once", n)
		}
		cancel()
		back = time.Now()
		api.up.Store(true)
		wg.Wait()
		if n := done.Load(); n != 3 {
			t.Fatalf("%d of 3 reads returned", n)
		}
		if d := time.Duration(latest.Load()); d > retryMax {
			t.Errorf("the reads went on %s after the API server came back, want within %s", d, retryMax)
		}
		if n := api.count("POST /api/v1/namespaces/a/events"); n != 1 {
			t.Errorf("the write was sent %d times, want once", n)
		}
	})
}
