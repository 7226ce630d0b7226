package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/egressd/egressd/test/agent"
)

// Profiles, taken when -profiles names a directory: what the numbers alone cannot tell is
// where the time goes.

// cpuProfile waits d, meanwhile recording the egress node's agent's CPU profile into
// h.profiles (when set).
func (h *harness) cpuProfile(d time.Duration) {
	if h.profiles == "" {
		time.Sleep(d)
		return
	}
	path := filepath.Join(h.profiles, "agent-"+h.lab.Nodes[0].Name+".cpu.pprof")
	b, err := h.lab.Nodes[0].Agent.Profile(fmt.Sprintf("profile?seconds=%d", int(d.Seconds())), d+time.Minute)
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		h.logf("CPU profile: %v", err)
		return
	}
	h.logf("CPU profile of the egress node's agent over the steady cluster: %s", path)
}

// heapProfiles writes each agent's and the controller's heap profile to h.profiles.
func (h *harness) heapProfiles() error {
	if h.profiles == "" {
		return nil
	}
	procs := map[string]*agent.Process{"controller": h.lab.Nodes[0].Controller}
	for _, n := range h.lab.Nodes {
		procs["agent-"+n.Name] = n.Agent
	}
	for name, p := range procs {
		b, err := p.Profile("heap", time.Minute)
		if err != nil {
			return err
		}
		path := filepath.Join(h.profiles, name+".heap.pprof")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
		h.logf("heap profile of %s: %s", name, path)
	}
	return nil
}

// profileFor records a CPU profile ("profile") or an execution trace ("trace", which shows
// where goroutines waited) over the next d in the background, through get (an agent's or the
// API server's pprof endpoint), into h.profiles as name; wait waits for it. Without h.profiles
// it does nothing.
func (h *harness) profileFor(d time.Duration, kind, name, what string, get func(name string, timeout time.Duration) ([]byte, error)) (wait func()) {
	if h.profiles == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b, err := get(fmt.Sprintf("%s?seconds=%d", kind, int(d.Seconds())), d+time.Minute)
		if err == nil {
			err = os.WriteFile(filepath.Join(h.profiles, name), b, 0o644)
		}
		if err != nil {
			h.logf("%s of %s: %v", kind, what, err)
			return
		}
		h.logf("%s of %s over %s: %s", kind, what, d, filepath.Join(h.profiles, name))
	}()
	return func() { <-done }
}

// apiServerProfile is get for the API server's pprof endpoint.
func (h *harness) apiServerProfile(name string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	u, err := url.Parse(name) // "profile?seconds=30": the query is not part of the path
	if err != nil {
		return nil, err
	}
	req := h.c.kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/" + u.Path)
	for k, vs := range u.Query() {
		req = req.Param(k, vs[0])
	}
	return req.DoRaw(ctx)
}
