package podannounce

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egressd/egressd/nodeagent/reachability"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// fakeStore serves the addresses in snat.
type fakeStore struct {
	snat map[netip.Addr]bool
	got  []netip.Addr
}

func (f *fakeStore) AnnounceRemote(_ context.Context, _ *watchers.Pod, ips []netip.Addr) (bool, error) {
	f.got = ips
	for _, ip := range ips {
		if f.snat[ip] {
			return true, nil
		}
	}
	return false, nil
}

// nodeTokens takes the token "node:<name>" for a token of that node's agent.
type nodeTokens struct{}

func (nodeTokens) Node(_ context.Context, token string) (string, error) {
	if node, ok := strings.CutPrefix(token, "node:"); ok {
		return node, nil
	}
	return "", errors.New("not a token")
}

// An announcement over the agents' gRPC server: answered as the store decides when it matches
// the receiver's view of the API (the pod on the announcing node, the call from that node's
// address, the addresses in its pod network, one per family, nobody else's, the Pod's own once
// it shows them), refused otherwise, each counted.
func TestAnnounce(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}}}
	far := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "far"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.9"}}}}
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	}
	// A pod of the node that runs with its address, one that finished (its address free again),
	// one whose status shows its address, and a node whose address is in the pod network.
	withIP := func(p *corev1.Pod, ip string, phase corev1.PodPhase) *corev1.Pod {
		p.UID, p.Status.PodIPs, p.Status.Phase = "uid-"+types.UID(p.Name), []corev1.PodIP{{IP: ip}}, phase
		return p
	}
	neighbour := withIP(pod("neighbour", "a"), "10.244.1.7", corev1.PodRunning)
	done := withIP(pod("done", "a"), "10.244.1.8", corev1.PodSucceeded)
	shown := withIP(pod("shown", "a"), "10.244.1.4", corev1.PodRunning)
	infra := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "infra"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.244.1.9"}}}}
	store := &fakeStore{snat: map[netip.Addr]bool{netip.MustParseAddr("10.244.1.5"): true, netip.MustParseAddr("10.244.1.8"): true, netip.MustParseAddr("10.244.1.4"): true}}
	metrics := NewMetrics()
	r := &Receiver{Snapshot: watcherstest.Snapshot(node, far, infra, pod("web", "a"), pod("db", "b"), pod("remote", "far"), neighbour, done, shown),
		Store: store, Metrics: metrics, Log: slog.New(slog.DiscardHandler), Auth: nodeTokens{}}
	srv := reachability.NewServer("127.0.0.1:0", r.Register)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	tokenFile := filepath.Join(t.TempDir(), "token")
	ann := &Announcer{Node: "a", Port: srv.Addr().Port(), TokenFile: tokenFile, Metrics: metrics, Log: slog.New(slog.DiscardHandler)}
	defer ann.Close()
	to := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	a := netip.MustParseAddr

	for _, c := range []struct {
		what   string
		node   string
		name   string
		ips    []netip.Addr
		result string
		token  string // "node:<node>" when empty
	}{
		{"without a token", "a", "web", []netip.Addr{a("10.244.1.5")}, "denied", "-"},
		{"with a token of another node", "a", "web", []netip.Addr{a("10.244.1.5")}, "denied", "node:far"},
		{"a pod this node SNATs", "a", "web", []netip.Addr{a("10.244.1.5")}, "served", ""},
		{"a pod it does not", "a", "web", []netip.Addr{a("10.244.1.6")}, "not_served", ""},
		{"a pod of another node", "a", "db", []netip.Addr{a("10.244.1.5")}, "denied", ""},
		{"an address outside the node's pod network", "a", "web", []netip.Addr{a("10.244.2.5")}, "denied", ""},
		{"from an address that is not the pod's node's", "far", "remote", []netip.Addr{a("10.244.1.5")}, "denied", ""},
		{"an unknown pod", "a", "nope", []netip.Addr{a("10.244.1.5")}, "denied", ""},
		{"another running pod's address", "a", "web", []netip.Addr{a("10.244.1.7")}, "denied", ""},
		{"a finished pod's address", "a", "web", []netip.Addr{a("10.244.1.8")}, "served", ""},
		{"a node's address", "a", "web", []netip.Addr{a("10.244.1.9")}, "denied", ""},
		{"two addresses of a family", "a", "web", []netip.Addr{a("10.244.1.5"), a("10.244.1.6")}, "denied", ""},
		{"the addresses its Pod shows", "a", "shown", []netip.Addr{a("10.244.1.4")}, "served", ""},
		{"others than its Pod shows", "a", "shown", []netip.Addr{a("10.244.1.6")}, "denied", ""},
	} {
		before := testutil.ToFloat64(metrics.announcements.WithLabelValues("received", c.result))
		ann.Node = c.node
		token := c.token
		if token == "" {
			token = "node:" + c.node
		}
		if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		ann.Announce(context.Background(), to, "ns", c.name, c.ips)
		if got := testutil.ToFloat64(metrics.announcements.WithLabelValues("received", c.result)) - before; got != 1 {
			t.Errorf("%s: received %q counted %v times, want once", c.what, c.result, got)
		}
	}
	if got := testutil.ToFloat64(metrics.announcements.WithLabelValues("sent", "served")); got != 3 {
		t.Errorf("sent served = %v, want 3", got)
	}
	if got := testutil.ToFloat64(metrics.announcements.WithLabelValues("sent", "failed")); got != 10 {
		t.Errorf("sent failed = %v, want the 10 refused", got)
	}
}
