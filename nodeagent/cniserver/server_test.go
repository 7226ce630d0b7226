package cniserver

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// An ADD whose Pod object the agent cannot read (not in its cache, the API says not found or
// does not answer) fails closed with try-again-later: its labels select its egress policies,
// and programmed by namespace alone it would leave with the node's address.
func TestAddWithoutThePodFailsClosed(t *testing.T) {
	s := &Server{Node: "n1", Store: NewStore(), Pods: watcherstest.Snapshot().Pods, Kube: fake.NewClientset(),
		Metrics: NewMetrics(), Log: slog.New(slog.DiscardHandler)}
	body, _ := json.Marshal(cniapi.Request{ContainerID: "sandbox", Namespace: "ns", Name: "web",
		IPs: []cniapi.IP{{Address: netip.MustParsePrefix("10.244.1.5/24")}}, Timeout: 100 * time.Millisecond})
	w := httptest.NewRecorder()
	s.add(w, httptest.NewRequest("POST", cniapi.PathAdd, bytes.NewReader(body)))
	var r cniapi.Response
	_ = json.Unmarshal(w.Body.Bytes(), &r)
	if w.Code != http.StatusServiceUnavailable || r.Code != cniapi.CodeTryAgainLater || !strings.Contains(r.Error, "cannot read Pod ns/web") {
		t.Errorf("ADD of a pod without a readable object: %d %+v, want %d with code %d", w.Code, r, http.StatusServiceUnavailable, cniapi.CodeTryAgainLater)
	}
}
