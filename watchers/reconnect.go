package watchers

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// The informers' reads wait on their own while the API server is away. A reflector whose list
// or watch fails waits before it tries again, twice as long each time up to [30, 60) s, and
// keeps its longest wait until two minutes pass without a failure: after an outage of a minute
// or more, each informer of each agent would see the API server again at its own moment, up to
// a minute late, and what changed meanwhile (a new EgressFirewall: no status entry, no rules on
// that node) would wait as long. A read that fails here instead waits until one prober of the
// client sees the API server ready again (GET /readyz, every few seconds at most, jittered),
// then tries again: the reflector sees a slow request, not a failure, and never backs off; and
// an agent knocks once per probe, not once per informer, while the API server is away.
const (
	retryMin = 250 * time.Millisecond
	retryMax = 3 * time.Second
	// dialTimeout bounds a connection attempt to a black-holed API server (no answer at all):
	// the next probe's first SYN goes out within retryMax of it coming back, where one dial of
	// 30 s (client-go's) could still be waiting out its retransmissions.
	dialTimeout = 5 * time.Second
	// retryLogEvery spaces the warnings while the API server stays away.
	retryLogEvery = 30 * time.Second
)

// ReadConfig is a copy of cfg for the informers' clients: their reads (GET: lists and watches,
// safe to repeat) are tried again, once the API server is ready, when it could not be reached
// or answered that it cannot serve now (502, 503, 504); writes are left alone (they are not
// made with these clients). 429 and 500 go to the reflector as they come: client-go honours
// the first's Retry-After, and the second is no outage.
func ReadConfig(cfg *rest.Config, log *slog.Logger) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Dial = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	c.Wrap(func(next http.RoundTripper) http.RoundTripper { return &retryingReads{next: next, log: log} })
	return c
}

type retryingReads struct {
	next http.RoundTripper
	log  *slog.Logger

	mu sync.Mutex
	// away is open while the API server is away (a prober runs), closed when it is ready again.
	away chan struct{}
}

func (r *retryingReads) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || req.Body != nil && req.Body != http.NoBody {
		return r.next.RoundTrip(req)
	}
	// again paces a read that fails again once the API server is ready (a resource it cannot
	// serve while /readyz passes): its first retry follows the probe, the next ones wait too.
	var again time.Duration
	for {
		resp, err := r.next.RoundTrip(req)
		if !unavailable(resp, err) || req.Context().Err() != nil {
			return resp, err
		}
		why := ""
		if err != nil {
			why = err.Error()
		} else {
			why = resp.Status
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
			resp.Body.Close()
		}
		ready := r.gone(req, why)
		select {
		case <-ready:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
		if again > 0 {
			t := time.NewTimer(again)
			select {
			case <-t.C:
			case <-req.Context().Done():
				t.Stop()
				return nil, req.Context().Err()
			}
		}
		again = min(max(2*again, retryMin), retryMax)
	}
}

// gone is told that a read failed for why: it returns a channel closed once the API server is
// ready again, starting the prober that finds out if none runs.
func (r *retryingReads) gone(req *http.Request, why string) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.away == nil {
		r.away = make(chan struct{})
		probe := req.Clone(context.Background())
		probe.URL.Path, probe.URL.RawQuery = "/readyz", ""
		r.log.Warn("the API server cannot be read; reads wait until it is ready again", "request", req.URL.Path, "err", why)
		go r.probe(probe, r.away)
	}
	return r.away
}

// probe asks req (GET /readyz) until the API server answers 200, then closes away.
func (r *retryingReads) probe(req *http.Request, away chan struct{}) {
	start, logged := time.Now(), time.Now()
	for delay := retryMin; ; delay = min(2*delay, retryMax) {
		time.Sleep(delay/2 + rand.N(delay/2+1)) // jittered: the nodes do not come back in step
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout+retryMax)
		resp, err := r.next.RoundTrip(req.WithContext(ctx))
		ready := err == nil && resp.StatusCode == http.StatusOK
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		cancel()
		if ready {
			r.mu.Lock()
			r.away = nil
			r.mu.Unlock()
			close(away)
			r.log.Info("the API server is ready again; reads go on", "after", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(logged) >= retryLogEvery {
			logged = time.Now()
			r.log.Warn("the API server is still away; reads wait", "for", time.Since(start).Round(time.Second))
		}
	}
}

// unavailable tells a read that did not reach a serving API server: a transport error (refused,
// reset, timed out, no route), or a status that says "not now" from the path to it or the API
// server itself.
func unavailable(resp *http.Response, err error) bool {
	if err != nil {
		return true
	}
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}
