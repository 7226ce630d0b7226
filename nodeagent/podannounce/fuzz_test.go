package podannounce

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egressd/egressd/watchers/watcherstest"
)

// An announcement comes from the network, from any peer that reaches the agents' gRPC port.
// Whatever its bytes and the address it comes from, decoding and validating it never panics;
// a refusal is a gRPC status (not found, permission denied, invalid argument) with no pod and
// no address; an accepted announcement names a pod of the announcing node, comes from an
// address of that node, and its addresses are the message's: at most one per family, without
// an IPv6 zone (no pod address has one), in the node's pod networks when it has some, no
// node's and no other live pod's, the Pod's own once its status shows some.
func FuzzAnnouncement(f *testing.F) {
	f.Add([]byte(`{"namespace":"ns","name":"web","node":"a","ips":["10.244.1.5"]}`), "127.0.0.1")
	f.Add([]byte(`{"namespace":"ns","name":"web","node":"a","ips":["10.244.1.5","fd00:10:244:1::5"]}`), "127.0.0.1")
	f.Add([]byte(`{"namespace":"ns","name":"web","node":"a","ips":["10.244.2.5"]}`), "127.0.0.1")
	f.Add([]byte(`{"namespace":"ns","name":"db","node":"a","ips":["10.244.1.5"]}`), "127.0.0.1")
	f.Add([]byte(`{"namespace":"ns","name":"remote","node":"far","ips":["10.244.9.5"]}`), "192.0.2.9")
	f.Add([]byte(`{"namespace":"ns","name":"remote","node":"far","ips":["::ffff:10.244.9.5"]}`), "::ffff:192.0.2.9")
	f.Add([]byte(`{"namespace":"ns","name":"remote","node":"far","ips":["fd00:10:244:9::5"]}`), "192.0.2.9")
	f.Add([]byte(`{"namespace":"ns","name":"remote","node":"far","ips":["10.244.9.7"]}`), "192.0.2.9")
	f.Add([]byte(`{"namespace":"ns","name":"remote","node":"far","ips":["10.244.9.8"]}`), "192.0.2.9")
	// Another pod's address with a zone: not found in the pods' index, though the same address.
	f.Add([]byte(`{"namespace":"ns","name":"remote","node":"far","ips":["fd00:10:244:9::7%eth0"]}`), "192.0.2.9")
	f.Add([]byte(`{"namespace":"ns","name":"remote","node":"far","ips":["192.0.2.9"]}`), "192.0.2.9")
	f.Add([]byte(`{"namespace":"ns","name":"remote","node":"far","ips":["10.244.9.5","10.244.9.6"]}`), "192.0.2.9")
	f.Add([]byte(`{"namespace":"ns","name":"remote","node":"far","ips":[]}`), "192.0.2.9")
	f.Add([]byte(`{"namespace":"ns","name":"shown","node":"far","ips":["10.244.9.6"]}`), "192.0.2.9")
	f.Add([]byte(`{"namespace":"ns","name":"nope","node":"a","ips":["10.244.1.5"]}`), "127.0.0.1")
	f.Add([]byte(`{"namespace":"ns","name":"web","node":"a","ips":["10.244.1.5"]`), "127.0.0.1")

	a := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24", "fd00:10:244:1::/64"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}}}
	far := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "far"}, // no spec.podCIDRs: the addresses are not bounded by them
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.9"},
			{Type: corev1.NodeInternalIP, Address: "fd00:10:244:9::1"}}}}
	pod := func(name, node, ip string, phase corev1.PodPhase) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: phase}}
		if ip != "" {
			p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		}
		return p
	}
	r := &Receiver{Snapshot: watcherstest.Snapshot(a, far, pod("web", "a", "", corev1.PodPending), pod("db", "b", "", corev1.PodPending),
		pod("remote", "far", "", corev1.PodPending), pod("pending", "", "", corev1.PodPending),
		pod("other", "far", "10.244.9.7", corev1.PodRunning), pod("other6", "far", "fd00:10:244:9::7", corev1.PodRunning),
		pod("done", "far", "10.244.9.8", corev1.PodSucceeded), pod("shown", "far", "10.244.9.6", corev1.PodRunning)),
		Metrics: NewMetrics(), Log: slog.New(slog.DiscardHandler), Auth: nodeTokens{}}
	callers := map[string]netip.Addr{"a": netip.MustParseAddr("127.0.0.1"), "far": netip.MustParseAddr("192.0.2.9")}
	cidrs := map[string][]netip.Prefix{"a": {netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")}}
	taken := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("fd00:10:244:9::1"),
		netip.MustParseAddr("10.244.9.7"), netip.MustParseAddr("fd00:10:244:9::7")}
	shown := map[string]netip.Addr{"shown": netip.MustParseAddr("10.244.9.6")}

	f.Fuzz(func(t *testing.T, msg []byte, from string) {
		var req Request
		if err := (jsonCodec{}).Unmarshal(msg, &req); err != nil {
			return // gRPC refuses the call: it never reaches the receiver
		}
		// The sender's token is its node's (what the token review checks is TestAnnounce's).
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer node:"+req.Node))
		caller, perr := netip.ParseAddr(from)
		if perr == nil {
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(caller, 40000))})
		}
		p, ips, err := r.validate(ctx, &req)
		if err != nil {
			s, ok := status.FromError(err)
			if !ok || !slices.Contains([]codes.Code{codes.NotFound, codes.PermissionDenied, codes.InvalidArgument}, s.Code()) {
				t.Fatalf("refusal %v is no gRPC status of a refusal", err)
			}
			if p != nil || ips != nil {
				t.Fatalf("refused (%v), yet pod %v, addresses %v", err, p, ips)
			}
			return
		}
		if p == nil || p.Namespace != req.Namespace || p.Name != req.Name || req.Node == "" || p.Spec.NodeName != req.Node {
			t.Fatalf("accepted %+v for pod %v", req, p)
		}
		if perr != nil || caller.Unmap() != callers[req.Node] {
			t.Fatalf("accepted %+v from %q, not an address of node %s", req, from, req.Node)
		}
		if len(ips) == 0 || len(ips) != len(req.IPs) {
			t.Fatalf("accepted %+v with addresses %v", req, ips)
		}
		for i, ip := range ips {
			if a, err := netip.ParseAddr(req.IPs[i]); err != nil || a.Unmap() != ip {
				t.Fatalf("address %v is not the message's %q", ip, req.IPs[i])
			}
			if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() {
				t.Fatalf("accepted address %v of %q", ip, req.IPs)
			}
			if slices.ContainsFunc(ips[:i], func(b netip.Addr) bool { return b.Is4() == ip.Is4() }) {
				t.Fatalf("more than one address of a family: %v", ips)
			}
			if c := cidrs[req.Node]; c != nil && !slices.ContainsFunc(c, func(p netip.Prefix) bool { return p.Contains(ip) }) {
				t.Fatalf("address %v is in no pod network of node %s", ip, req.Node)
			}
			if slices.Contains(taken, ip) {
				t.Fatalf("address %v of a node or another pod lent to %s/%s", ip, req.Namespace, req.Name)
			}
		}
		if s, ok := shown[req.Name]; ok && (len(ips) != 1 || ips[0] != s) {
			t.Fatalf("pod %s shows %v, announced as %v", req.Name, s, ips)
		}
	})
}
