package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/egressd/egressd/dataplane/tcx"
	"github.com/egressd/egressd/nodeagent"
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
//     the four capabilities and no other), becomes Ready and holds the leader Lease;
//   - egressd's classifier is attached to a real pod's interface, and that pod's own traffic
//     is judged as an external host sees it: its EgressFirewall passes one host and denies the
//     other, its EgressQoS marks DSCP 46;
//   - a rolling update of the DaemonSet to another image, while the pod streams: every
//     datagram to the allowed host arrives, with its DSCP, and none to the denied one;
//   - deleting the deploy resources and `egressctl cleanup` leave the node as it was before
//     (the kubelet's empty hostPath directory /run/egressd aside).
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
	lease := awaitLeader(ctx, t, l, n.Name, time.Time{})

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
	progs, err := l.Nodes[0].TCXIngress(hostLink)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(progs, func(p tcx.Program) bool { return p.Name == "egressd_frompod" }) {
		t.Fatalf("tcx ingress of %s (pod %s/stream): %v, want egressd_frompod", hostLink, tenant, progs)
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
	awaitLeader(ctx, t, l, n.Name, lease)

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
	poll.Eventually(t, "no egressd process on the node", time.Minute, func() error {
		if p := n.Processes("egressd"); len(p) > 0 {
			return fmt.Errorf("egressd pids %v", p)
		}
		return nil
	})
	// The agent leaves egressd-cni in the chain when it stops (an upgrade opens no window):
	// the cleanup takes it out.
	awaitChained(t, n, true)
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

// deployObjects are the objects of deploy/'s kustomization with the DaemonSet's image set to
// ref (what `kustomize edit set image` does).
// The DaemonSet's CNI hostPath volumes name the node's directories (the chart's cni.confDir
// and cni.binDir do the same for a distribution whose CNI lives elsewhere).
func deployObjects(t *testing.T, ref string, n *node.Node) []*unstructured.Unstructured {
	t.Helper()
	objs := kustomizeBase(t)
	found := false
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" || o.GetName() != "egressd" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		c := containers[0].(map[string]any)
		if !strings.HasPrefix(fmt.Sprint(c["image"]), egressdRepo+":") {
			t.Fatalf("deploy/daemonset.yaml: image %v, want %s:<tag>", c["image"], egressdRepo)
		}
		c["image"] = ref
		if err := unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
		volumes, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
		paths := map[string]string{"cni-conf": n.CNIConfDir(), "cni-bin": n.CNIBinDir()}
		for _, v := range volumes {
			m := v.(map[string]any)
			if p, ok := paths[fmt.Sprint(m["name"])]; ok {
				m["hostPath"].(map[string]any)["path"] = p
				delete(paths, fmt.Sprint(m["name"]))
			}
		}
		if len(paths) > 0 {
			t.Fatalf("deploy/daemonset.yaml lacks the CNI volumes %v", paths)
		}
		if err := unstructured.SetNestedSlice(o.Object, volumes, "spec", "template", "spec", "volumes"); err != nil {
			t.Fatal(err)
		}
		found = true
	}
	if !found {
		t.Fatal("deploy/ has no DaemonSet egressd")
	}
	return objs
}

func applyDeploy(ctx context.Context, t *testing.T, l *lab.Lab, n *node.Node, ref string) {
	t.Helper()
	var docs []string
	for _, o := range deployObjects(t, ref, n) {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	if err := l.Kube.Apply(ctx, "", strings.Join(docs, "\n---\n")); err != nil {
		t.Fatalf("apply deploy/: %v", err)
	}
}

// deleteDeploy deletes deploy/'s objects, last first, as `kubectl delete -k` does.
func deleteDeploy(ctx context.Context, t *testing.T, l *lab.Lab, n *node.Node, ref string) {
	t.Helper()
	objs := deployObjects(t, ref, n)
	for i := len(objs) - 1; i >= 0; i-- {
		o := objs[i]
		if err := l.Kube.Delete(ctx, o.GetAPIVersion(), o.GetKind(), o.GetNamespace(), o.GetName()); err != nil {
			t.Fatalf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// awaitAgent waits until the DaemonSet's only pod runs image ref on the node, Ready, and the
// pod named old (if any) is gone.
func awaitAgent(ctx context.Context, t *testing.T, l *lab.Lab, n *node.Node, ref, old string) *corev1.Pod {
	t.Helper()
	var ready *corev1.Pod
	err := poll.Until(ctx, "egressd pod with "+ref+" Ready on "+n.Name, 3*time.Minute, func() error {
		pods, err := l.Client.CoreV1().Pods("egressd").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=egressd"})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d egressd pods", len(pods.Items))
		}
		p := &pods.Items[0]
		if p.Name == old || p.Spec.NodeName != n.Name || p.Spec.Containers[0].Image != ref {
			return fmt.Errorf("pod %s on %q with %s", p.Name, p.Spec.NodeName, p.Spec.Containers[0].Image)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = p
				return nil
			}
		}
		return fmt.Errorf("pod %s %s, not Ready: %v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ready
}

// checkAgentSecurity checks the agent's pod as the API server has it and its process as the
// kernel runs it: not privileged, exactly the DaemonSet's capabilities, no new privileges, a
// seccomp filter, a read-only root filesystem.
func checkAgentSecurity(t *testing.T, n *node.Node, p *corev1.Pod) {
	t.Helper()
	sc := p.Spec.Containers[0].SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged {
		t.Fatalf("pod %s: securityContext %+v, want privileged: false", p.Name, sc)
	}
	want := 0
	for _, c := range daemonSetCapabilities(t) {
		bit, ok := capBits[c]
		if !ok {
			t.Fatalf("capability %s: unknown to this test", c)
		}
		want |= 1 << bit
	}
	pids := n.Processes("egressd")
	if len(pids) != 1 {
		t.Fatalf("egressd processes on %s: %v, want one", n.Name, pids)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pids[0]))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	for _, k := range []string{"CapEff", "CapPrm", "CapBnd"} {
		got, err := strconv.ParseUint(fields[k], 16, 64)
		if err != nil || got != uint64(want) {
			t.Errorf("egressd (pid %d) %s = %s, want %x (the DaemonSet's %v)", pids[0], k, fields[k], want, daemonSetCapabilities(t))
		}
	}
	if fields["NoNewPrivs"] != "1" {
		t.Errorf("egressd (pid %d) NoNewPrivs = %s, want 1 (allowPrivilegeEscalation: false)", pids[0], fields["NoNewPrivs"])
	}
	if fields["Seccomp"] != "2" {
		t.Errorf("egressd (pid %d) Seccomp = %s, want 2, a filter (seccompProfile RuntimeDefault)", pids[0], fields["Seccomp"])
	}
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pids[0]))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		// <id> <parent> <dev> <root> <mount point> <options> ...
		if f := strings.Fields(line); len(f) > 5 && f[4] == "/" && !slices.Contains(strings.Split(f[5], ","), "ro") {
			t.Errorf("egressd (pid %d): root filesystem mounted %s, want ro (readOnlyRootFilesystem)", pids[0], f[5])
		}
	}
}

var capBits = map[string]int{"NET_ADMIN": 12, "NET_RAW": 13, "PERFMON": 38, "BPF": 39}

// awaitLeader waits until the node's agent holds the leader Lease, acquired after since, and
// returns when it acquired it.
func awaitLeader(ctx context.Context, t *testing.T, l *lab.Lab, holder string, since time.Time) time.Time {
	t.Helper()
	var acquired time.Time
	err := poll.Until(ctx, "Lease egressd/"+nodeagent.LeaseName+" held by "+holder, time.Minute, func() error {
		lease, err := l.Client.CoordinationV1().Leases("egressd").Get(ctx, nodeagent.LeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		h, at := "", time.Time{}
		if lease.Spec.HolderIdentity != nil {
			h = *lease.Spec.HolderIdentity
		}
		if lease.Spec.AcquireTime != nil {
			at = lease.Spec.AcquireTime.Time
		}
		if h != holder || !at.After(since) {
			return fmt.Errorf("holder %q acquired at %s", h, at)
		}
		acquired = at
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return acquired
}

// startStream creates the tenant's pod that streams to both external hosts, and waits until it
// runs.
func startStream(ctx context.Context, t *testing.T, l *lab.Lab, n *node.Node) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stream", Namespace: tenant},
		Spec: corev1.PodSpec{
			NodeName: n.Name,
			Containers: []corev1.Container{{Name: "labpod", Image: node.PodRef, ImagePullPolicy: corev1.PullNever,
				Args: []string{"-every", streamEvery.String(), "-for", streamFor.String(),
					net.JoinHostPort(allowedIP, strconv.Itoa(streamPort)), net.JoinHostPort(deniedIP, strconv.Itoa(streamPort))}}},
			AutomountServiceAccountToken: new(bool),
		},
	}
	// The namespace's default ServiceAccount comes from a controller, a moment after it.
	err := poll.Until(ctx, "pod "+tenant+"/stream created", 30*time.Second, func() error {
		_, err := l.Client.CoreV1().Pods(tenant).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var running *corev1.Pod
	err = poll.Until(ctx, "pod "+tenant+"/stream running", 2*time.Minute, func() error {
		p, err := l.Client.CoreV1().Pods(tenant).Get(ctx, "stream", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("%s %v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		running = p
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return running
}

// podHostLink is the node's interface towards the pod (ptp's host-side veth).
func podHostLink(t *testing.T, n *node.Node, ln *lab.Node, p *corev1.Pod) string {
	t.Helper()
	out, err := ln.NS.Run("ip", "-o", "route", "get", p.Status.PodIP)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(` dev (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("route to pod %s (%s) on %s: %q names no device", p.Name, p.Status.PodIP, n.Name, out)
	}
	return m[1]
}

// checkDSCP checks that the external host saw the stream, every datagram with dscp.
func checkDSCP(t *testing.T, c *lab.Capture, dscp uint8) {
	t.Helper()
	var total int
	wrong := map[uint8]int{}
	for _, p := range c.Packets() {
		if p.Proto != "udp" || p.DstPort != streamPort || !p.ForHost {
			continue
		}
		total++
		if p.DSCP != dscp {
			wrong[p.DSCP]++
		}
	}
	if total == 0 || len(wrong) > 0 {
		t.Errorf("the allowed host saw %d datagrams of the stream; with another DSCP than %d: %v", total, dscp, wrong)
	}
}

type streamCount struct{ sent, failed int }

// awaitStreamEnd waits for the stream pod's final counts, by destination address.
func awaitStreamEnd(ctx context.Context, t *testing.T, n *node.Node) map[string]streamCount {
	t.Helper()
	re := regexp.MustCompile(`(?m)^sent (\S+):\d+ (\d+) failed (\d+)$`)
	counts := map[string]streamCount{}
	err := poll.Until(ctx, "pod "+tenant+"/stream done", streamFor+time.Minute, func() error {
		out, err := n.ContainerLog(tenant, "stream", "labpod")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "\ndone\n") {
			return fmt.Errorf("log so far: %q", out)
		}
		for _, m := range re.FindAllStringSubmatch(out, -1) {
			s, _ := strconv.Atoi(m[2])
			f, _ := strconv.Atoi(m[3])
			counts[m[1]] = streamCount{s, f}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return counts
}

// nodeState is what egressd may change on a node, as text: nftables, routing rules and tables,
// addresses, bpffs, tcx programs of every interface, the CNI socket directory. Routes and
// addresses of the interface skip (a pod's, which the CNI owns) are left out.
func nodeState(t *testing.T, n *node.Node, ln *lab.Node, skip string) string {
	t.Helper()
	var b strings.Builder
	for _, args := range [][]string{
		{"nft", "list", "ruleset"},
		{"ip", "-4", "rule"}, {"ip", "-6", "rule"},
		{"ip", "-4", "route", "show", "table", "all"}, {"ip", "-6", "route", "show", "table", "all"},
		{"ip", "-o", "addr"},
	} {
		out, err := ln.NS.Run(args[0], args[1:]...)
		if err != nil {
			t.Fatalf("%v on %s: %v", args, n.Name, err)
		}
		fmt.Fprintf(&b, "# %s\n", strings.Join(args, " "))
		for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
			if skip != "" && regexp.MustCompile(`\b`+regexp.QuoteMeta(skip)+`\b`).MatchString(line) {
				continue
			}
			b.WriteString(line + "\n")
		}
	}
	// /run/egressd itself is the kubelet's (the DaemonSet's hostPath, DirectoryOrCreate).
	for _, root := range []string{"/sys/fs/bpf", "/run/egressd"} {
		fmt.Fprintf(&b, "# find %s\n", root)
		_ = filepath.Walk(n.RootPath(root), func(p string, _ os.FileInfo, err error) error {
			if err == nil && p != n.RootPath("/run/egressd") {
				rel, _ := filepath.Rel(n.RootPath("/"), p)
				b.WriteString("/" + rel + "\n")
			}
			return nil
		})
	}
	b.WriteString("# tcx\n")
	err := ln.NS.Do(func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, ifi := range ifs {
			for _, hook := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
				res, err := link.QueryPrograms(link.QueryOptions{Target: ifi.Index, Attach: hook})
				if err != nil {
					return fmt.Errorf("tcx %s of %s: %w", hook, ifi.Name, err)
				}
				if len(res.Programs) > 0 {
					fmt.Fprintf(&b, "%s %s: %d programs\n", ifi.Name, hook, len(res.Programs))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// awaitChained waits until the node's CNI list ends with egressd-cni (the agent installed it),
// or, with want false, no longer has it (the cleanup removed it).
func awaitChained(t *testing.T, n *node.Node, want bool) {
	t.Helper()
	file := filepath.Join(n.CNIConfDir(), "10-realnode.conflist")
	poll.Eventually(t, fmt.Sprintf("egressd-cni chained %v in %s", want, file), 30*time.Second, func() error {
		l, err := libcni.ConfListFromFile(file)
		if err != nil {
			return err
		}
		chained := len(l.Plugins) == 2 && l.Plugins[1].Network.Type == "egressd-cni"
		_, binErr := os.Stat(filepath.Join(n.CNIBinDir(), "egressd-cni"))
		if chained != want || (binErr == nil) != want {
			return fmt.Errorf("%d plugins, last %s; binary: %v", len(l.Plugins), l.Plugins[len(l.Plugins)-1].Network.Type, binErr)
		}
		return nil
	})
}
