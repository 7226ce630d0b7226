package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/dataplane/tc"
	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/node"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

const (
	// egressdRepo is the DaemonSet's image without its tag; the lab's builds are tagged lab-N.
	egressdRepo = "ghcr.io/egressd/egressd"
	// streamPort is where the stream pod sends, on both external hosts.
	streamPort = 9000
	// streamEvery and streamFor: the stream pod's pace and length, which must cover the rolling
	// update.
	streamEvery = 20 * time.Millisecond
	streamFor   = 45 * time.Second
	// tenant is the namespace of the stream pod and of its EgressFirewall and EgressQoS.
	tenant = "tenant"
	// voiceDSCP is what the EgressQoS sets on the pod's traffic to the allowed host.
	voiceDSCP = 46
)

var (
	allowedIP = "203.0.113.10"
	deniedIP  = "198.51.100.10"
)

// TestPrivilegedRealNode deploys egressd the way users do, on a real node: kubelet, containerd,
// runc and a ptp + host-local + egressd-cni chain inside a lab node (test/node), images built
// and imported without a registry. deploy/ is applied as `kubectl apply -k deploy/` would
// (with the image set to the lab's build, as `kustomize edit set image` does), and then:
//   - the DaemonSet's pod runs on the node with the shipped security context (not privileged,
//     the four capabilities and no other) and becomes Ready; the controller Deployment's pod
//     runs beside it and holds the leader Lease;
//   - egressd's classifier is attached to a real pod's interface, and that pod's own traffic
//     is judged as an external host sees it: its EgressFirewall passes one host and denies the
//     other, its EgressQoS marks DSCP 46;
//   - a rolling update of the DaemonSet to another image, while the pod streams: every
//     datagram to the allowed host arrives, with its DSCP, and none to the denied one;
//   - deleting the deploy resources and `egressctl cleanup` leave the node as it was before
//     (the kubelet's hostPath directory /run/egressd included).
func TestPrivilegedRealNode(t *testing.T) {
	privileged.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	log := realNodeLog{t}
	bins, err := node.Build(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{Log: log, Scheduler: bins.Scheduler})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	l, err := lab.Start(ctx, cp, lab.Options{Nodes: 1, Kubelets: []int{0}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	allowed, err := l.AddExternal("allowed", lab.ExternalOptions{}, allowedIP)
	if err != nil {
		t.Fatal(err)
	}
	denied, err := l.AddExternal("denied", lab.ExternalOptions{}, deniedIP)
	if err != nil {
		t.Fatal(err)
	}
	allowedGot, err := allowed.CountUDP(streamPort)
	if err != nil {
		t.Fatal(err)
	}
	deniedGot, err := denied.CountUDP(streamPort)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	v1, err := node.EgressdImage(log, bins.OCIImage, dir, egressdRepo+":lab-1", "lab-1")
	if err != nil {
		t.Fatal(err)
	}
	v2, err := node.EgressdImage(log, bins.OCIImage, dir, egressdRepo+":lab-2", "lab-2")
	if err != nil {
		t.Fatal(err)
	}
	labImages, err := node.LabImages(log, bins.OCIImage, dir)
	if err != nil {
		t.Fatal(err)
	}
	plugins, err := lab.ReferencePlugins(log)
	if err != nil {
		t.Fatal(err)
	}
	// The node's CNI directory holds only ptp's list: the DaemonSet installs egressd-cni.
	n, err := node.Start(ctx, node.Options{Lab: l, Node: l.Nodes[0], Bins: bins, CNIPlugins: []string{plugins},
		PauseImage: node.PauseRef, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubelet:\n%s\ncontainerd:\n%s", n.LogTail("kubelet", 40), n.LogTail("containerd", 20))
		}
		n.Close()
		if left := n.Leftovers(); len(left) > 0 {
			t.Errorf("after the node closed: %v", left)
		}
	})
	if err := n.Import(append(labImages, v1)...); err != nil {
		t.Fatal(err)
	}
	before := nodeState(t, n, l.Nodes[0], "")

	// kubectl apply -k deploy/
	applyDeploy(ctx, t, l, n, v1.Ref)
	agentPod := awaitAgent(ctx, t, l, n, v1.Ref, "")
	awaitChained(t, n, true)
	t.Logf("egressd pod %s Ready on %s", agentPod.Name, n.Name)
	checkAgentSecurity(t, n, agentPod)
	// egressd-cni's STATUS answers once egressd serves its socket: the runtime's network, and
	// so the Node, become ready.
	if err := n.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	lease := awaitLeader(ctx, t, l, n.Name, v1.Ref, time.Time{})

	// A tenant whose pod may reach one external host only, with DSCP 46.
	policy := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default, namespace: %[1]s}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: %[2]s/32}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
---
apiVersion: k8s.ovn.org/v1
kind: EgressQoS
metadata: {name: default, namespace: %[1]s}
spec:
  egress:
  - {dscp: %[3]d, dstCIDR: %[2]s/32}
`, tenant, allowedIP, voiceDSCP)
	if err := l.Kube.Apply(ctx, "", policy); err != nil {
		t.Fatal(err)
	}
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressFirewall", tenant, "default", "status.status", fwApplied, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressQoS", tenant, "default", "status.status", qosApplied, time.Minute); err != nil {
		t.Fatal(err)
	}
	allowedCap, deniedCap := allowed.Capture(), denied.Capture()
	defer allowedCap.Stop()
	defer deniedCap.Stop()
	stream := startStream(ctx, t, l, n)
	hostLink := podHostLink(t, n, l.Nodes[0], stream)
	progs, err := l.Nodes[0].IngressPrograms(hostLink)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(progs, func(p tc.Program) bool { return p.Name == "egressd_frompod" }) {
		t.Fatalf("ingress of %s (pod %s/stream): %v, want egressd_frompod", hostLink, tenant, progs)
	}
	poll.Eventually(t, "the allowed host receives the stream", 10*time.Second, func() error {
		if got := allowedGot(); got < 50 {
			return fmt.Errorf("%d datagrams so far", got)
		}
		return nil
	})
	if got := deniedGot(); got != 0 {
		t.Errorf("the denied host received %d datagrams of pod %s/stream", got, tenant)
	}
	checkDSCP(t, allowedCap, voiceDSCP)

	// Rolling update under traffic.
	if err := n.Import(v2); err != nil {
		t.Fatal(err)
	}
	rollStart := time.Now()
	applyDeploy(ctx, t, l, n, v2.Ref)
	newPod := awaitAgent(ctx, t, l, n, v2.Ref, agentPod.Name)
	rolled := time.Now()
	t.Logf("rolled to %s (pod %s) in %s", v2.Ref, newPod.Name, rolled.Sub(rollStart).Round(time.Millisecond))
	checkAgentSecurity(t, n, newPod)
	awaitLeader(ctx, t, l, n.Name, v2.Ref, lease)

	sent := awaitStreamEnd(ctx, t, n)
	if end := stream.CreationTimestamp.Add(streamFor); rolled.After(end) {
		t.Fatalf("the rolling update ended at %s, after the stream (until %s): it was not under traffic", rolled.Format(time.TimeOnly), end.Format(time.TimeOnly))
	}
	a, d := sent[allowedIP], sent[deniedIP]
	if a.failed != 0 || d.failed != 0 || a.sent < 1000 || d.sent < 1000 {
		t.Fatalf("the stream pod sent %+v to the allowed host and %+v to the denied one: want >= 1000 each, no send error", a, d)
	}
	err = poll.Until(ctx, "the allowed host received every datagram", 3*time.Second, func() error {
		if got := allowedGot(); got != uint64(a.sent) {
			return fmt.Errorf("received %d of the %d the pod sent: %d lost across the rolling update", got, a.sent, a.sent-int(got))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	t.Logf("the stream pod sent %d datagrams to each host; the allowed host received %d, the denied one %d", a.sent, allowedGot(), deniedGot())
	if got := deniedGot(); got != 0 {
		t.Errorf("the denied host received %d of the %d datagrams the pod sent", got, d.sent)
	}
	if got := deniedCap.Count(func(c lab.Captured) bool { return c.DstPort == streamPort }); got != 0 {
		t.Errorf("the denied host's link saw %d datagrams of the stream", got)
	}
	checkDSCP(t, allowedCap, voiceDSCP)

	// kubectl delete -k deploy/, then the documented cleanup on the node.
	deleteDeploy(ctx, t, l, n, v2.Ref)
	// The controller's pods are in the pod network: the kubelet tears their sandboxes down
	// (CNI DEL) before their objects go.
	poll.Eventually(t, "no pod of egressd left", 2*time.Minute, func() error {
		pods, err := l.Client.CoreV1().Pods("egressd").List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) > 0 {
			return fmt.Errorf("pods %v (%v)", len(pods.Items), err)
		}
		return nil
	})
	poll.Eventually(t, "no egressd process on the node", time.Minute, func() error {
		if p := n.Processes("egressd"); len(p) > 0 {
			return fmt.Errorf("egressd pids %v", p)
		}
		return nil
	})
	// An agent stopped because its DaemonSet is deleted takes egressd-cni out of the chain (a
	// restart or an upgrade leaves it: no window), so that no new pod waits on a fail-closed
	// plugin whose agent is gone; the cleanup removes the rest (the binary).
	awaitCNI(t, n, false, true)
	out, err := n.Command(filepath.Join(dir, "egressd-lab-2", "egressctl"), "cleanup",
		"--cni-conf-dir", n.CNIConfDir(), "--cni-bin-dir", n.CNIBinDir()).CombinedOutput()
	if err != nil {
		t.Fatalf("egressctl cleanup: %v\n%s", err, out)
	}
	t.Logf("egressctl cleanup: %s", strings.TrimSpace(string(out)))
	awaitChained(t, n, false)
	if after := nodeState(t, n, l.Nodes[0], hostLink); after != before {
		t.Errorf("the node after delete and cleanup differs from before the deploy:\n--- before\n%s\n--- after\n%s", before, after)
	}
}

type realNodeLog struct{ t *testing.T }

func (w realNodeLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = realNodeLog{}
