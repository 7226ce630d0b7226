package cniserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/egressd/egressd/dataplane/router"
	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
	"github.com/egressd/egressd/watchers"
)

// DefaultWait bounds an ADD whose request carries no timeout.
const DefaultWait = 10 * time.Second

// getTimeout bounds the API GET of a pod the informer does not hold yet.
const getTimeout = 2 * time.Second

// Server serves the plugin's calls on a unix socket.
type Server struct {
	Node  string
	Store *Store
	// Pods is the informer's pod lister; Kube reads a pod it does not hold yet.
	Pods watchers.PodLister
	Kube kubernetes.Interface
	// Synced reports whether the agent finished its first sync (STATUS).
	Synced func() bool
	// Routers, when set, configures EgressRouter pods (nodeagent/egressrouter.Node).
	Routers Routers
	// Peers, when set, announces a new pod to its egress nodes' agents before the ADD returns.
	Peers Peers
	// Metrics, when set, times the ADDs.
	Metrics *Metrics
	Log     *slog.Logger

	http *http.Server
	// listening is when Listen began serving (STATUS's grace for the first sync).
	listening time.Time
}

// firstSyncGrace is how long STATUS reports the plugin ready before the agent's first sync:
// ADDs wait for that sync meanwhile. A restarted agent syncs within a second or two; reporting
// the runtime's network not ready at each restart would make the Node NotReady, and its egress
// IPs move, for nothing. An agent that cannot sync for longer (no API server) says so.
const firstSyncGrace = 30 * time.Second

// Peers announces a new pod to the agents of the egress nodes it is steered to
// (nodeagent/podannounce), so that they SNAT its first packet; it returns when all answered or
// ctx ended.
type Peers interface {
	Announce(ctx context.Context, to []netip.Addr, namespace, name string, ips []netip.Addr)
}

// peerWait bounds the announcement of a new pod to its egress nodes.
const peerWait = time.Second

// Routers compiles the configuration of a router pod (nil for other pods) and hears the
// outcome of applying it.
type Routers interface {
	Config(ctx context.Context, pod *watchers.Pod) (*router.Config, error)
	Configured(ctx context.Context, pod *watchers.Pod, master string, failure error)
}

// routerConfig is the configuration of the router pod as the plugin hands it on (nil for
// other pods).
func routerConfig(ctx context.Context, r Routers, pod *watchers.Pod) (json.RawMessage, error) {
	rc, err := r.Config(ctx, pod)
	if err != nil || rc == nil {
		return nil, err
	}
	return json.Marshal(rc)
}

// Listen binds the socket (replacing a stale one) and serves until Close.
func (s *Server) Listen(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+cniapi.PathAdd, s.add)
	mux.HandleFunc("POST "+cniapi.PathDel, s.del)
	mux.HandleFunc("POST "+cniapi.PathCheck, s.check)
	mux.HandleFunc("POST "+cniapi.PathGC, s.gc)
	mux.HandleFunc("GET "+cniapi.PathStatus, s.status)
	mux.HandleFunc("POST "+cniapi.PathRouter, s.routerResult)
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.listening = time.Now()
	go func() {
		if err := s.http.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.Log.Error("CNI socket", "err", err)
		}
	}()
	s.Log.Info("serving", "socket", path, "what", "CNI plugin")
	return nil
}

// Close stops serving; calls in flight end (the plugins see an error and fail closed).
func (s *Server) Close() {
	if s.http != nil {
		s.http.Close()
	}
}

func reply(w http.ResponseWriter, status int, r cniapi.Response) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(r)
}

func fail(w http.ResponseWriter, status int, code uint, format string, a ...any) {
	reply(w, status, cniapi.Response{Code: code, Error: fmt.Sprintf(format, a...)})
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(v); err != nil {
		fail(w, http.StatusBadRequest, cniapi.CodeDecode, "decode request: %v", err)
		return false
	}
	return true
}

// sandboxIPs are the request's addresses on interfaces inside the sandbox (or on no named
// interface), deduplicated.
func sandboxIPs(req *cniapi.Request) []netip.Addr {
	host := map[string]bool{}
	for _, i := range req.Interfaces {
		if i.Sandbox == "" {
			host[i.Name] = true
		}
	}
	var out []netip.Addr
	for _, ip := range req.IPs {
		a := ip.Address.Addr()
		if !a.IsValid() || host[ip.Interface] {
			continue
		}
		if !containsAll(out, []netip.Addr{a}) {
			out = append(out, a)
		}
	}
	return out
}

// hostInterfaces are the request's interfaces outside the sandbox (the host sides the CNI made:
// a veth, a bridge), deduplicated.
func hostInterfaces(req *cniapi.Request) []string {
	var out []string
	for _, i := range req.Interfaces {
		if i.Sandbox == "" && i.Name != "" && !slices.Contains(out, i.Name) {
			out = append(out, i.Name)
		}
	}
	return out
}

func (s *Server) add(w http.ResponseWriter, r *http.Request) {
	var req cniapi.Request
	if !decode(w, r, &req) {
		return
	}
	if req.Namespace == "" || req.Name == "" || req.ContainerID == "" {
		fail(w, http.StatusBadRequest, cniapi.CodeInvalidEnv, "the pod's namespace, name and sandbox are required (K8S_POD_NAMESPACE, K8S_POD_NAME, CNI_CONTAINERID)")
		return
	}
	start := time.Now()
	wait := req.Timeout
	if wait <= 0 {
		wait = DefaultWait
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	ips := sandboxIPs(&req)
	if len(ips) == 0 {
		// Nothing egressd classifies (an interface without addresses): nothing to wait for.
		reply(w, http.StatusOK, cniapi.Response{Programmed: time.Now()})
		return
	}
	pod, source, err := s.pod(ctx, req.Namespace, req.Name)
	s.Metrics.object(source)
	if err != nil {
		// Its labels decide which policies select it: programmed by namespace alone it would
		// leave with the node's address, not its egress IP. Fail closed; the runtime retries
		// (failOpen lets it start unprogrammed instead).
		fail(w, http.StatusServiceUnavailable, cniapi.CodeTryAgainLater, "egressd cannot read Pod %s/%s, whose labels select its egress policies: %v", req.Namespace, req.Name, err)
		s.Metrics.added("failed", time.Since(start))
		s.Log.Error("CNI ADD refused: the Pod object is not readable", "pod", req.Namespace+"/"+req.Name, "sandbox", req.ContainerID, "err", err)
		return
	}
	looked := time.Since(start)
	if req.UID != "" && pod.UID != "" && string(pod.UID) != req.UID {
		s.Log.Info("CNI ADD for a pod whose object has another UID; using the namespace only", "pod", req.Namespace+"/"+req.Name)
		pod = bare(req.Namespace, req.Name, s.Node)
	}
	var rc json.RawMessage
	if s.Routers != nil {
		if rc, err = routerConfig(ctx, s.Routers, pod); err != nil {
			fail(w, http.StatusServiceUnavailable, cniapi.CodeRouterFailed, "egress router: %v", err)
			return
		}
	}
	e := s.Store.announce(req.ContainerID, pod, ips, hostInterfaces(&req), false)
	select {
	case <-e.done:
		if s.Peers != nil && len(e.targets) > 0 {
			pctx, cancel := context.WithTimeout(ctx, peerWait)
			s.Peers.Announce(pctx, e.targets, e.key.namespace, e.key.name, ips)
			cancel()
		}
		s.Metrics.added("programmed", time.Since(start))
		s.Log.Debug("CNI ADD programmed", "pod", e.key.String(), "sandbox", req.ContainerID, "ips", ips, "took", time.Since(start),
			"object", source, "lookup", looked)
		reply(w, http.StatusOK, cniapi.Response{Programmed: e.programmed, Router: rc})
	case <-ctx.Done():
		s.Store.mu.Lock()
		lastErr := e.lastErr
		s.Store.mu.Unlock()
		if lastErr != nil {
			fail(w, http.StatusServiceUnavailable, cniapi.CodeProgramFailed, "egressd could not program pod %s within %s: %v", e.key, wait, lastErr)
		} else {
			fail(w, http.StatusServiceUnavailable, cniapi.CodeTryAgainLater, "egressd did not program pod %s within %s", e.key, wait)
		}
		s.Metrics.added("failed", time.Since(start))
		s.Log.Error("CNI ADD not programmed in time", "pod", e.key.String(), "sandbox", req.ContainerID, "wait", wait, "err", lastErr)
	}
}

// pod is the pod's object: from the informer, else from the API (the kubelet calls the CNI
// after the object exists); and where it came from (informer, api, none: then an error).
func (s *Server) pod(ctx context.Context, namespace, name string) (*watchers.Pod, string, error) {
	if s.Pods != nil {
		if p, err := s.Pods.Pods(namespace).Get(name); err == nil {
			return p, "informer", nil
		}
	}
	if s.Kube == nil {
		return nil, "none", fmt.Errorf("not in the cache and no API client")
	}
	gctx, cancel := context.WithTimeout(ctx, getTimeout)
	defer cancel()
	p, err := s.Kube.CoreV1().Pods(namespace).Get(gctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, "none", err
	}
	return watchers.CachedPod(p), "api", nil
}

func (s *Server) del(w http.ResponseWriter, r *http.Request) {
	var req cniapi.Request
	if !decode(w, r, &req) {
		return
	}
	if s.Store.forget(req.ContainerID) {
		s.Log.Debug("CNI DEL", "pod", req.Namespace+"/"+req.Name, "sandbox", req.ContainerID)
	}
	reply(w, http.StatusOK, cniapi.Response{})
}

func (s *Server) check(w http.ResponseWriter, r *http.Request) {
	var req cniapi.Request
	if !decode(w, r, &req) {
		return
	}
	if req.Namespace == "" || req.Name == "" {
		fail(w, http.StatusBadRequest, cniapi.CodeInvalidEnv, "the pod's namespace and name are required (K8S_POD_NAMESPACE, K8S_POD_NAME)")
		return
	}
	if err := s.Store.check(podKey{req.Namespace, req.Name}, sandboxIPs(&req)); err != nil {
		fail(w, http.StatusConflict, cniapi.CodeCheckMismatch, "%v", err)
		return
	}
	reply(w, http.StatusOK, cniapi.Response{})
}

func (s *Server) gc(w http.ResponseWriter, r *http.Request) {
	var req cniapi.GCRequest
	if !decode(w, r, &req) {
		return
	}
	if n := s.Store.keepOnly(req.Valid); n > 0 {
		s.Log.Info("CNI GC forgot sandboxes", "count", n)
	}
	reply(w, http.StatusOK, cniapi.Response{})
}

// routerResult hears how a router pod's configuration went.
func (s *Server) routerResult(w http.ResponseWriter, r *http.Request) {
	var res cniapi.RouterResult
	if !decode(w, r, &res) {
		return
	}
	if s.Routers == nil || res.Namespace == "" || res.Name == "" {
		fail(w, http.StatusBadRequest, cniapi.CodeInvalidEnv, "a router result needs the pod's namespace and name, and egressd serving routers")
		return
	}
	var failure error
	if res.Error != "" {
		failure = errors.New(res.Error)
	}
	pod, _, err := s.pod(r.Context(), res.Namespace, res.Name)
	if err != nil {
		pod = bare(res.Namespace, res.Name, s.Node) // the router's condition names it by name
	}
	s.Routers.Configured(r.Context(), pod, res.Master, failure)
	reply(w, http.StatusOK, cniapi.Response{})
}

func (s *Server) status(w http.ResponseWriter, _ *http.Request) {
	if s.Synced != nil && !s.Synced() && time.Since(s.listening) > firstSyncGrace {
		fail(w, http.StatusServiceUnavailable, cniapi.CodeNotAvailable, "egressd has not finished its first sync in %s", time.Since(s.listening).Round(time.Second))
		return
	}
	reply(w, http.StatusOK, cniapi.Response{})
}
