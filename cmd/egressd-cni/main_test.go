package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/cniserver"
	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
)

// Conformance of the plugin binary as a runtime calls it (environment, stdin, stdout, exit
// code, error JSON), against the agent's real socket server whose "sync loop" is a goroutine
// that applies every announced pod (or fails it) at once.

var plugin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "egressd-cni-test-")
	if err != nil {
		panic(err)
	}
	// The plugin with its router helper beside it, as installed.
	plugin = filepath.Join(dir, "egressd-cni")
	if out, err := exec.Command("go", "build", "-o", dir+"/", ".", "../"+cniapi.RouterHelper).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// agent serves the socket; fail makes every sync fail the pods.
type agent struct {
	socket string
	store  *cniserver.Store
	fail   bool
}

func startAgent(t *testing.T, fail bool) *agent {
	t.Helper()
	a := &agent{socket: filepath.Join(t.TempDir(), "cni.sock"), store: cniserver.NewStore(), fail: fail}
	// The API holds every pod asked for (the agent fails an ADD whose Pod it cannot read).
	kube := fake.NewClientset()
	kube.PrependReactor("get", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		get := action.(k8stesting.GetAction)
		return true, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: get.GetNamespace(), Name: get.GetName()}, Spec: corev1.PodSpec{NodeName: "n"}}, nil
	})
	srv := &cniserver.Server{Node: "n", Store: a.store, Kube: kube, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Synced: func() bool { return true }}
	if err := srv.Listen(a.socket); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); srv.Close() })
	go func() { // the sync loop: compile what is announced, apply it
		for {
			select {
			case <-ctx.Done():
				return
			case <-a.store.Changed():
			}
			a.sync()
		}
	}()
	a.sync()
	return a
}

func (a *agent) sync() {
	_, pods := a.store.Overlay(emptySnapshot())
	var st dataplane.State
	res := dataplane.Result{Failed: map[dataplane.Origin]error{}}
	for _, p := range pods {
		o := dataplane.Origin{Kind: cluster.KindPod, Namespace: p.Namespace, Name: p.Name}
		dp := dataplane.Pod{Origin: o}
		for _, ip := range p.Status.PodIPs {
			dp.IPs = append(dp.IPs, netip.MustParseAddr(ip.IP))
		}
		st.Classifier.Pods = append(st.Classifier.Pods, dp)
		if a.fail {
			res.Failed[o] = fmt.Errorf("attach: no such interface")
		}
	}
	a.store.Applied(&st, res)
}

const prevResult = `{"cniVersion":"1.1.0","interfaces":[{"name":"veth1","mac":"ee:ee:ee:ee:ee:ee"},{"name":"eth0","mac":"0a:00:00:00:00:01","sandbox":"/run/netns/x"}],
"ips":[{"address":"10.244.0.5/24","gateway":"10.244.0.1","interface":1},{"address":"fd00:10:244::5/64","interface":1}],"routes":[{"dst":"0.0.0.0/0"}]}`

func conf(socket string, extra string, prev bool) string {
	c := `{"cniVersion":"1.1.0","name":"lab","type":"egressd-cni","socket":"` + socket + `"` + extra
	if prev {
		c += `,"prevResult":` + prevResult
	}
	return c + "}"
}

// run calls the plugin; it returns stdout and the CNI error (nil on exit 0).
func run(t *testing.T, command, stdin, args string) (string, *types.Error) {
	t.Helper()
	return runBinary(t, plugin, command, stdin, args)
}

func runBinary(t *testing.T, bin, command, stdin, args string) (string, *types.Error) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=sandbox1", "CNI_NETNS=/run/netns/x", "CNI_IFNAME=eth0",
		"CNI_PATH=/opt/cni/bin", "CNI_ARGS=" + args}
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err == nil {
		return out.String(), nil
	}
	var e types.Error
	if jerr := json.Unmarshal(out.Bytes(), &e); jerr != nil {
		t.Fatalf("%s failed (%v) without a CNI error on stdout: %q, stderr %q", command, err, out.String(), errb.String())
	}
	return out.String(), &e
}

const podArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=sandbox1"

func TestAddReturnsPrevResultOnceProgrammed(t *testing.T) {
	a := startAgent(t, false)
	out, cerr := run(t, "ADD", conf(a.socket, "", true), podArgs)
	if cerr != nil {
		t.Fatalf("ADD: %+v", cerr)
	}
	var got, want map[string]any
	_ = json.Unmarshal([]byte(out), &got)
	_ = json.Unmarshal([]byte(prevResult), &want)
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Errorf("ADD printed %s, want prevResult unchanged %s", g, w)
	}
	// CHECK agrees with what the agent holds; DEL twice succeeds; CHECK then fails.
	if _, cerr := run(t, "CHECK", conf(a.socket, "", true), podArgs); cerr != nil {
		t.Errorf("CHECK after ADD: %+v", cerr)
	}
	for i := range 2 {
		if _, cerr := run(t, "DEL", conf(a.socket, "", false), podArgs); cerr != nil {
			t.Errorf("DEL %d: %+v", i+1, cerr)
		}
	}
	if _, cerr := run(t, "CHECK", conf(a.socket, "", true), podArgs); cerr == nil || cerr.Code != 100 {
		t.Errorf("CHECK after DEL: %+v, want code 100", cerr)
	}
}

func TestErrors(t *testing.T) {
	a := startAgent(t, false)
	failing := startAgent(t, true)
	gone := filepath.Join(t.TempDir(), "none.sock")
	cases := []struct {
		name, command, stdin, args string
		code                       uint
	}{
		{"ADD without prevResult (not chained)", "ADD", conf(a.socket, "", false), podArgs, types.ErrInvalidNetworkConfig},
		{"ADD without the pod's name", "ADD", conf(a.socket, "", true), "K8S_POD_NAMESPACE=ns", types.ErrInvalidEnvironmentVariables},
		{"ADD with a bad config", "ADD", `{"cniVersion":"1.1.0","name":"x","type":"egressd-cni",`, podArgs, types.ErrDecodingFailure},
		{"ADD with a bad timeout", "ADD", conf(a.socket, `,"timeout":"soon"`, true), podArgs, types.ErrInvalidNetworkConfig},
		{"ADD of an unsupported version", "ADD", strings.Replace(conf(a.socket, "", true), `"cniVersion":"1.1.0","name"`, `"cniVersion":"0.2.0","name"`, 1), podArgs, types.ErrIncompatibleCNIVersion},
		{"ADD, egressd down: fail closed", "ADD", conf(gone, `,"timeout":"300ms"`, true), podArgs, types.ErrTryAgainLater},
		{"ADD, egressd cannot program the pod", "ADD", conf(failing.socket, `,"timeout":"500ms"`, true), podArgs, 101},
		{"CHECK, egressd down", "CHECK", conf(gone, `,"timeout":"300ms"`, true), podArgs, types.ErrTryAgainLater},
		{"CHECK of an unknown pod", "CHECK", conf(a.socket, "", true), podArgs, 100},
		{"STATUS, egressd down", "STATUS", conf(gone, `,"timeout":"300ms"`, false), "", 50},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, cerr := run(t, c.command, c.stdin, c.args)
			if cerr == nil || cerr.Code != c.code {
				t.Errorf("%+v, want CNI error code %d", cerr, c.code)
			}
		})
	}
}

func TestFailOpenDelGCStatusVersion(t *testing.T) {
	a := startAgent(t, false)
	gone := filepath.Join(t.TempDir(), "none.sock")
	if out, cerr := run(t, "ADD", conf(gone, `,"timeout":"300ms","failOpen":true`, true), podArgs); cerr != nil || !strings.Contains(out, "10.244.0.5") {
		t.Errorf("ADD, egressd down, failOpen: %+v %s, want prevResult", cerr, out)
	}
	start := time.Now()
	if _, cerr := run(t, "DEL", conf(gone, `,"timeout":"300ms"`, false), podArgs); cerr != nil {
		t.Errorf("DEL with egressd down: %+v, want success", cerr)
	}
	t.Logf("DEL with egressd down took %s", time.Since(start).Round(time.Millisecond))
	if _, cerr := run(t, "GC", `{"cniVersion":"1.1.0","name":"lab","type":"egressd-cni","socket":"`+a.socket+`","cni.dev/valid-attachments":[]}`, ""); cerr != nil {
		t.Errorf("GC: %+v", cerr)
	}
	if _, cerr := run(t, "STATUS", conf(a.socket, "", false), ""); cerr != nil {
		t.Errorf("STATUS: %+v", cerr)
	}
	if _, cerr := run(t, "STATUS", conf(gone, `,"timeout":"300ms","failOpen":true`, false), ""); cerr != nil {
		t.Errorf("STATUS, egressd down, failOpen: %+v, want ready (ADD goes on without egressd)", cerr)
	}
	// An egressd that says it cannot serve (no first sync for long): not ready, unless failOpen.
	unsynced := refusing(t, cniapi.CodeNotAvailable, "egressd has not finished its first sync in 1m0s")
	if _, cerr := run(t, "STATUS", conf(unsynced, "", false), ""); cerr == nil || cerr.Code != cniapi.CodeNotAvailable {
		t.Errorf("STATUS, egressd not serving: %+v, want code %d", cerr, cniapi.CodeNotAvailable)
	}
	if _, cerr := run(t, "STATUS", conf(unsynced, `,"failOpen":true`, false), ""); cerr != nil {
		t.Errorf("STATUS, egressd not serving, failOpen: %+v, want ready", cerr)
	}
	// A router pod without its configuration never starts, failOpen or not: it would serve nothing.
	noRouter := refusing(t, cniapi.CodeRouterFailed, "egress router: no EgressRouter r")
	if _, cerr := run(t, "ADD", conf(noRouter, `,"failOpen":true`, true), podArgs); cerr == nil || cerr.Code != cniapi.CodeRouterFailed {
		t.Errorf("ADD of a router pod without configuration, failOpen: %+v, want code %d", cerr, cniapi.CodeRouterFailed)
	}
	out, cerr := run(t, "VERSION", `{"cniVersion":"1.1.0"}`, "")
	if cerr != nil {
		t.Fatal(cerr)
	}
	var v struct {
		CNIVersion        string   `json:"cniVersion"`
		SupportedVersions []string `json:"supportedVersions"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || strings.Join(v.SupportedVersions, ",") != "0.3.0,0.3.1,0.4.0,1.0.0,1.1.0" {
		t.Errorf("VERSION: %s (%v), want 0.3.0 to 1.1.0", out, err)
	}
}

// refusing serves an egressd that answers every call with the CNI error code and message.
func refusing(t *testing.T, code uint, msg string) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "refusing.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(cniapi.Response{Code: code, Error: msg})
	}))
	t.Cleanup(func() { l.Close() })
	return socket
}

// A conflist at 0.3.1 (flannel's, Calico's): ADD works and returns prevResult in that version.
func TestAddAtAnOlderVersion(t *testing.T) {
	a := startAgent(t, false)
	prev031 := `{"cniVersion":"0.3.1","interfaces":[{"name":"veth1","mac":"ee:ee:ee:ee:ee:ee"},{"name":"eth0","mac":"0a:00:00:00:00:01","sandbox":"/run/netns/x"}],` +
		`"ips":[{"version":"4","address":"10.244.0.5/24","gateway":"10.244.0.1","interface":1}]}`
	c := `{"cniVersion":"0.3.1","name":"lab","type":"egressd-cni","socket":"` + a.socket + `","prevResult":` + prev031 + `}`
	out, cerr := run(t, "ADD", c, podArgs)
	if cerr != nil {
		t.Fatalf("ADD at 0.3.1: %+v", cerr)
	}
	var res struct {
		CNIVersion string `json:"cniVersion"`
		IPs        []struct {
			Version string `json:"version"`
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.CNIVersion != "0.3.1" || len(res.IPs) != 1 || res.IPs[0].Version != "4" || res.IPs[0].Address != "10.244.0.5/24" {
		t.Errorf("ADD at 0.3.1 returned %s (%v), want prevResult at 0.3.1", out, err)
	}
	if _, pods := a.store.Overlay(emptySnapshot()); len(pods) != 1 || pods[0].Status.PodIP != "10.244.0.5" {
		t.Errorf("egressd was told of %d pods, want the pod with 10.244.0.5", len(pods))
	}
}
