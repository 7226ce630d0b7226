package main

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
)

// routerAgent answers every ADD with a router's configuration and records the outcomes the
// plugin reports.
type routerAgent struct {
	socket string
	mu     sync.Mutex
	got    []cniapi.RouterResult
}

func startRouterAgent(t *testing.T, config string) *routerAgent {
	t.Helper()
	a := &routerAgent{socket: filepath.Join(t.TempDir(), "router.sock")}
	l, err := net.Listen("unix", a.socket)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+cniapi.PathAdd, func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(cniapi.Response{Programmed: time.Now(), Router: json.RawMessage(config)})
	})
	mux.HandleFunc("POST "+cniapi.PathRouter, func(w http.ResponseWriter, r *http.Request) {
		var res cniapi.RouterResult
		if err := json.NewDecoder(r.Body).Decode(&res); err != nil {
			t.Errorf("router outcome: %v", err)
		}
		a.mu.Lock()
		a.got = append(a.got, res)
		a.mu.Unlock()
		json.NewEncoder(w).Encode(cniapi.Response{})
	})
	go http.Serve(l, mux)
	t.Cleanup(func() { l.Close() })
	return a
}

func (a *routerAgent) outcomes() []cniapi.RouterResult {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.got
}

// The ADD of a router pod runs the helper installed beside the plugin with egressd's
// configuration, reports the helper's outcome to egressd under the pod's name, and fails with
// code 102 when the router was not configured, failOpen or not: here the helper refuses the
// configuration (a mode that is no macvlan mode) before it touches any namespace. Without the
// helper beside it, the plugin says which file it missed; run through a symbolic link, it runs
// the helper beside the link.
func TestRouterPodConfiguredByTheHelper(t *testing.T) {
	a := startRouterAgent(t, `{"mode":"Sideways","addresses":["192.0.2.10/24"]}`)
	_, cerr := run(t, "ADD", conf(a.socket, `,"failOpen":true`, true), podArgs)
	if cerr == nil || cerr.Code != cniapi.CodeRouterFailed || !strings.Contains(cerr.Details, `macvlan mode "Sideways"`) {
		t.Errorf("ADD of a router pod the helper refused: %+v, want code %d naming the mode", cerr, cniapi.CodeRouterFailed)
	}
	got := a.outcomes()
	if len(got) != 1 || got[0].Namespace != "ns" || got[0].Name != "web" || got[0].ContainerID != "sandbox1" ||
		!strings.Contains(got[0].Error, `macvlan mode "Sideways"`) {
		t.Errorf("egressd was told %+v, want one failure of ns/web in sandbox1 naming the mode", got)
	}

	alone := filepath.Join(t.TempDir(), "egressd-cni")
	b, err := os.ReadFile(plugin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	_, cerr = runBinary(t, alone, "ADD", conf(a.socket, "", true), podArgs)
	helper := filepath.Join(filepath.Dir(alone), cniapi.RouterHelper)
	if cerr == nil || cerr.Code != cniapi.CodeRouterFailed || !strings.Contains(cerr.Details, helper) {
		t.Errorf("ADD of a router pod without the helper: %+v, want code %d naming %s", cerr, cniapi.CodeRouterFailed, helper)
	}
	if got := a.outcomes(); len(got) != 2 || !strings.Contains(got[1].Error, helper) {
		t.Errorf("egressd was told %+v, want a second failure naming %s", got, helper)
	}

	// A plugin directory of symbolic links (packaged plugins): the helper is the one beside
	// the link the runtime ran, not beside the file it points to.
	links := t.TempDir()
	for name, target := range map[string]string{"egressd-cni": alone, cniapi.RouterHelper: filepath.Join(filepath.Dir(plugin), cniapi.RouterHelper)} {
		if err := os.Symlink(target, filepath.Join(links, name)); err != nil {
			t.Fatal(err)
		}
	}
	_, cerr = runBinary(t, filepath.Join(links, "egressd-cni"), "ADD", conf(a.socket, "", true), podArgs)
	if cerr == nil || cerr.Code != cniapi.CodeRouterFailed || !strings.Contains(cerr.Details, `macvlan mode "Sideways"`) {
		t.Errorf("ADD of a router pod through a linked plugin: %+v, want the linked helper's refusal of the mode", cerr)
	}
}
