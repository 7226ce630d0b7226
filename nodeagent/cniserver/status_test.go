package cniserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
)

// STATUS reports the plugin ready before the agent's first sync (ADDs wait for it: a restart
// must not make the runtime's network, and so the Node, not ready), and not ready once the
// first sync is overdue.
func TestStatusBeforeTheFirstSync(t *testing.T) {
	s := &Server{Synced: func() bool { return false }, listening: time.Now()}
	status := func() (int, cniapi.Response) {
		w := httptest.NewRecorder()
		s.status(w, httptest.NewRequest("GET", cniapi.PathStatus, nil))
		var r cniapi.Response
		_ = json.Unmarshal(w.Body.Bytes(), &r)
		return w.Code, r
	}
	if code, r := status(); code != http.StatusOK {
		t.Errorf("just started, not synced yet: %d %+v, want ready", code, r)
	}
	s.listening = time.Now().Add(-firstSyncGrace - time.Second)
	if code, r := status(); code != http.StatusServiceUnavailable || r.Code != cniapi.CodeNotAvailable {
		t.Errorf("no first sync after %s: %d %+v, want code %d", firstSyncGrace, code, r, cniapi.CodeNotAvailable)
	}
	s.Synced = func() bool { return true }
	if code, r := status(); code != http.StatusOK {
		t.Errorf("synced: %d %+v, want ready", code, r)
	}
}
