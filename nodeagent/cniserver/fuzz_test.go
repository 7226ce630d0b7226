package cniserver

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"

	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// call runs a handler on body; the request's context is over, so that an ADD that would wait
// for a sync answers at once (not programmed in time).
func call(t *testing.T, h http.HandlerFunc, path string, body []byte) (int, cniapi.Response) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := httptest.NewRecorder()
	h(w, httptest.NewRequest("POST", path, bytes.NewReader(body)).WithContext(ctx))
	var r cniapi.Response
	if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%s answered %d %q (%v), not a JSON Response", path, w.Code, w.Body.Bytes(), err)
	}
	if (w.Code == http.StatusOK) != (r.Error == "" && r.Code == 0) {
		t.Fatalf("%s answered %d with error %q, code %d: a failure needs both, a success neither", path, w.Code, r.Error, r.Code)
	}
	return w.Code, r
}

// The socket's requests come from whatever runs the plugin. Whatever a body holds, the
// handlers never panic and answer a JSON Response: a body that does not decode with code 6, an
// ADD or CHECK without the pod's namespace and name (ADD: and sandbox) with code 4, an ADD
// without an address in the sandbox with success at once, an ADD of a pod the agent cannot
// read with try-again-later; and an ADD announces to the store exactly the sandbox's
// addresses: each once, valid, not on a host-side interface, every one of them, under the
// pod's name and a Pod object of another UID never. DEL then forgets the sandbox; GC keeps the
// sandboxes it lists and only those.
func FuzzRequest(f *testing.F) {
	for _, s := range []string{
		`{"containerID":"sandbox1","netns":"/run/netns/x","ifName":"eth0","namespace":"ns","name":"web","uid":"uid-web",` +
			`"ips":[{"address":"10.244.0.5/24","interface":"eth0"},{"address":"fd00:10:244::5/64","interface":"eth0"}],` +
			`"interfaces":[{"name":"veth1","mac":"ee:ee:ee:ee:ee:ee"},{"name":"eth0","mac":"0a:00:00:00:00:01","sandbox":"/run/netns/x"}],"timeout":9000000000}`,
		`{"containerID":"sandbox1","namespace":"ns","name":"web","ips":[{"address":"10.244.0.5/24","interface":"veth1"}],"interfaces":[{"name":"veth1"}]}`,
		`{"containerID":"sandbox1","namespace":"ns","name":"web","ips":[{"address":"10.244.0.5/24"},{"address":"10.244.0.5/32"}]}`,
		`{"containerID":"sandbox1","namespace":"ns","name":"web","uid":"uid-other","ips":[{"address":"10.244.0.5/24"}]}`,
		`{"containerID":"sandbox1","namespace":"ns","name":"gone","ips":[{"address":"10.244.0.5/24"}],"timeout":100000000}`,
		`{"containerID":"sandbox1","namespace":"ns","name":"web","ips":[{"address":""}]}`,
		`{"containerID":"sandbox1","namespace":"ns","name":"web","ips":[{"address":"10.244.0.5"}]}`,
		`{"containerID":"sandbox1","namespace":"ns"}`,
		`{"containerID":"sandbox1","netns":"","namespace":"ns","name":"web"}`,
		`{"valid":["sb1"]}`,
		`{"valid":[]}`,
		`{"containerID":`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	snap := watcherstest.Snapshot(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "n1"}})
	metrics := NewMetrics()
	f.Fuzz(func(t *testing.T, body []byte) {
		var req cniapi.Request
		derr := json.NewDecoder(bytes.NewReader(body)).Decode(&req)
		s := &Server{Node: "n1", Store: NewStore(), Pods: snap.Pods, Metrics: metrics, Log: slog.New(slog.DiscardHandler)}

		code, r := call(t, s.add, cniapi.PathAdd, body)
		e := s.Store.byID[req.ContainerID]
		_, lookupErr := snap.Pods.Pods(req.Namespace).Get(req.Name)
		host := map[string]bool{}
		for _, i := range req.Interfaces {
			if i.Sandbox == "" {
				host[i.Name] = true
			}
		}
		var want []netip.Addr // the sandbox's addresses
		for _, ip := range req.IPs {
			if a := ip.Address.Addr(); a.IsValid() && !host[ip.Interface] && !slices.Contains(want, a) {
				want = append(want, a)
			}
		}
		switch {
		case derr != nil:
			if code != http.StatusBadRequest || r.Code != cniapi.CodeDecode {
				t.Fatalf("ADD of a body that does not decode (%v): %d %+v", derr, code, r)
			}
		case req.Namespace == "" || req.Name == "" || req.ContainerID == "":
			if code != http.StatusBadRequest || r.Code != cniapi.CodeInvalidEnv {
				t.Fatalf("ADD without the pod's namespace, name or sandbox: %d %+v", code, r)
			}
		case len(want) == 0:
			if code != http.StatusOK {
				t.Fatalf("ADD without addresses in the sandbox: %d %+v, want success", code, r)
			}
		case lookupErr != nil:
			if code != http.StatusServiceUnavailable || r.Code != cniapi.CodeTryAgainLater {
				t.Fatalf("ADD of a pod the agent cannot read: %d %+v, want try again later", code, r)
			}
		default:
			if code != http.StatusServiceUnavailable || r.Code != cniapi.CodeTryAgainLater || e == nil {
				t.Fatalf("ADD not programmed: %d %+v, announced %v; want try again later, announced", code, r, e)
			}
			if e.key != (podKey{req.Namespace, req.Name}) || !slices.Equal(e.ips, want) {
				t.Fatalf("announced %v with %v, want %s/%s with the sandbox's %v", e.key, e.ips, req.Namespace, req.Name, want)
			}
			if e.pod.UID != "" && req.UID != "" && string(e.pod.UID) != req.UID {
				t.Fatalf("announced a Pod of UID %s for a sandbox of pod UID %s", e.pod.UID, req.UID)
			}
			for i, ip := range e.pod.Status.PodIPs {
				if a, err := netip.ParseAddr(ip.IP); err != nil || a != want[i] {
					t.Fatalf("announced Pod shows %q, want %v", ip.IP, want)
				}
			}
		}
		if e != nil && (derr != nil || len(want) == 0 || lookupErr != nil) || len(s.Store.byID) > 1 {
			t.Fatalf("the store holds %d sandboxes after an ADD that announced none", len(s.Store.byID))
		}

		code, r = call(t, s.check, cniapi.PathCheck, body)
		switch {
		case derr != nil && (code != http.StatusBadRequest || r.Code != cniapi.CodeDecode):
			t.Fatalf("CHECK of a body that does not decode: %d %+v", code, r)
		case derr == nil && (req.Namespace == "" || req.Name == "") && (code != http.StatusBadRequest || r.Code != cniapi.CodeInvalidEnv):
			t.Fatalf("CHECK without the pod's namespace or name: %d %+v", code, r)
		case derr == nil && req.Namespace != "" && req.Name != "" && (code != http.StatusConflict || r.Code != cniapi.CodeCheckMismatch):
			t.Fatalf("CHECK before any sync: %d %+v, want a mismatch", code, r)
		}

		code, r = call(t, s.del, cniapi.PathDel, body)
		if derr != nil && (code != http.StatusBadRequest || r.Code != cniapi.CodeDecode) || derr == nil && code != http.StatusOK {
			t.Fatalf("DEL: %d %+v", code, r)
		}
		if derr == nil && s.Store.byID[req.ContainerID] != nil {
			t.Fatalf("DEL of %q left it in the store", req.ContainerID)
		}

		var gc cniapi.GCRequest
		gerr := json.NewDecoder(bytes.NewReader(body)).Decode(&gc)
		for _, id := range []string{"sb1", "sb2"} {
			s.Store.announce(id, &watchers.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: id, UID: ktypes.UID(id)}}, nil, nil, false)
		}
		code, r = call(t, s.gc, cniapi.PathGC, body)
		if gerr != nil && (code != http.StatusBadRequest || r.Code != cniapi.CodeDecode) || gerr == nil && code != http.StatusOK {
			t.Fatalf("GC: %d %+v", code, r)
		}
		for _, id := range []string{"sb1", "sb2"} {
			kept := s.Store.byID[id] != nil
			if gerr == nil && kept != slices.Contains(gc.Valid, id) || gerr != nil && !kept {
				t.Fatalf("GC %q (%v): sandbox %s kept %v", gc.Valid, gerr, id, kept)
			}
		}
	})
}
