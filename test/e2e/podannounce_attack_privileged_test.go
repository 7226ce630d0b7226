package e2e

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/egressd/egressd/nodeagent/podannounce"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedPodAnnounceForged attacks an egress node's announcement port from another
// node's address, as a hostNetwork pod there can: announcements without a token, with a
// pod-bound token of another ServiceAccount, with the node's own agent token for a running pod
// and a junk address, and with it for another node's pod. The real API server reviews every
// token; each is refused with its reason, the egress node serves none, and the announced pod
// keeps leaving with its egress IP.
func TestPrivilegedPodAnnounceForged(t *testing.T) {
	privileged.Require(t)
	empty := ""
	l := lab.New(t, lab.Options{Nodes: 2, Agents: true, NodeLabels: map[int]map[string]string{1: {assignable: empty}}})
	ctx := context.Background()
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10"); err != nil {
		t.Fatal(err)
	}
	ns := egressNamespace(t, l)
	name := "eip-" + ns
	createEgressIP(t, l, name, "eip", eip4)
	waitItems(t, l, name, l.Nodes[1].Name+"="+eip4)
	victim := addPod(t, l.Nodes[0], ns, "victim", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	eventuallySource(t, "before", victim, "203.0.113.10:80", netip.MustParseAddr(eip4))
	remote := addPod(t, l.Nodes[1], ns, "remote", lab.PodOptions{Labels: map[string]string{"app": "eip"}})

	// A workload pod's own pod-bound token, for the announcements' audience (as a pod on node-0
	// could project it): of a ServiceAccount that is not the agents'.
	if _, err := l.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "intruder"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	intruder, err := l.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "intruder"},
		Spec: corev1.PodSpec{NodeName: l.Nodes[0].Name, ServiceAccountName: "intruder", HostNetwork: true, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "c", Image: "registry.example/intruder"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := l.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "intruder", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{podannounce.Audience}, BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: intruder.Name, UID: intruder.UID}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agentToken, err := os.ReadFile(filepath.Join(l.Dir, l.Nodes[0].Name+".announce-token"))
	if err != nil {
		t.Fatal(err)
	}

	// The attacker's client, dialling from node-0's network namespace (its node address).
	from := l.Nodes[0]
	conn, err := grpc.NewClient(net.JoinHostPort(l.Nodes[1].IPv4.String(), "9107"), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return from.Dial(ctx, "tcp", addr) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	counted := func(result string) uint64 {
		v, err := l.Nodes[1].Agent.Sample(`egressd_pod_announcements_total{direction="received",result="` + result + `"}`)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseUint(v, 10, 64)
		return n
	}
	deniedBefore, servedBefore := counted("denied"), counted("served")
	junk := "10.244.0.250"
	for _, a := range []struct {
		what  string
		token string
		req   podannounce.Request
		want  codes.Code
	}{
		{"no token", "", podannounce.Request{Namespace: ns, Name: victim.Name, Node: from.Name, IPs: []string{junk}}, codes.Unauthenticated},
		{"a hostNetwork pod's own pod-bound token", tr.Status.Token, podannounce.Request{Namespace: ns, Name: victim.Name, Node: from.Name, IPs: []string{junk}}, codes.Unauthenticated},
		{"the node's agent token, a running pod with a junk address", string(agentToken), podannounce.Request{Namespace: ns, Name: victim.Name, Node: from.Name, IPs: []string{junk}}, codes.PermissionDenied},
		{"the node's agent token, another node's pod", string(agentToken), podannounce.Request{Namespace: ns, Name: remote.Name, Node: l.Nodes[1].Name, IPs: []string{remote.IPv4.String()}}, codes.PermissionDenied},
	} {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if a.token != "" {
			cctx = metadata.AppendToOutgoingContext(cctx, "authorization", "Bearer "+a.token)
		}
		var reply podannounce.Reply
		err := conn.Invoke(cctx, "/egressd.v1.PodAnnouncer/Announce", &a.req, &reply, grpc.CallContentSubtype("json"))
		cancel()
		if got := status.Code(err); got != a.want {
			t.Errorf("%s: %v (served %v), want %s", a.what, err, reply.Served, a.want)
		} else {
			t.Logf("%s: refused: %v", a.what, err)
		}
	}
	if d, s := counted("denied")-deniedBefore, counted("served")-servedBefore; d != 4 || s != 0 {
		t.Errorf("egress node counted %d denied and %d served announcements, want 4 and 0", d, s)
	}
	eventuallySource(t, "after the forged announcements", victim, "203.0.113.10:80", netip.MustParseAddr(eip4))
}
