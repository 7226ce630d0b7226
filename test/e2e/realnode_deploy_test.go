package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/egressd/egressd/nodeagent/leader"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/node"
	"github.com/egressd/egressd/test/poll"
)

// deployObjects are the objects of deploy/'s kustomization with the DaemonSet's and the
// controller Deployment's image set to ref (what `kustomize edit set image` does).
// The DaemonSet's CNI hostPath volumes name the node's directories (the chart's cni.confDir
// and cni.binDir do the same for a distribution whose CNI lives elsewhere).
func deployObjects(t *testing.T, ref string, n *node.Node) []*unstructured.Unstructured {
	t.Helper()
	objs := kustomizeBase(t)
	found, controller := false, false
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == "egressd-controller" {
			setImage(t, o, ref, "containers")
			controller = true
		}
		if o.GetKind() != "DaemonSet" || o.GetName() != "egressd" {
			continue
		}
		setImage(t, o, ref, "initContainers", "containers")
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
	if !found || !controller {
		t.Fatalf("deploy/ lacks the DaemonSet egressd (%t) or the Deployment egressd-controller (%t)", found, controller)
	}
	return objs
}

// setImage sets ref as the image of every container of the pod template's lists kinds.
func setImage(t *testing.T, o *unstructured.Unstructured, ref string, kinds ...string) {
	t.Helper()
	for _, kind := range kinds {
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", kind)
		for _, ci := range containers {
			c := ci.(map[string]any)
			if !strings.HasPrefix(fmt.Sprint(c["image"]), egressdRepo+":") {
				t.Fatalf("deploy/: %s %s: %s %v image %v, want %s:<tag>", o.GetKind(), o.GetName(), kind, c["name"], c["image"], egressdRepo)
			}
			c["image"] = ref
		}
		if err := unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", kind); err != nil {
			t.Fatal(err)
		}
	}
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
	pids := agentProcesses(n)
	if len(pids) != 1 {
		t.Fatalf("egressd agent processes on %s: %v, want one", n.Name, pids)
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
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/" && !slices.Contains(strings.Split(f[5], ","), "ro") {
			t.Errorf("egressd (pid %d): root filesystem mounted %s, want ro (readOnlyRootFilesystem)", pids[0], f[5])
		}
		// The init container installed egressd-cni: the agent cannot write the host's plugins.
		if len(f) > 4 && strings.Contains(f[4], "cni/bin") {
			t.Errorf("egressd (pid %d) has the host's CNI plugin directory mounted at %s: want it in the init container only", pids[0], f[4])
		}
	}
}

var capBits = map[string]int{"NET_ADMIN": 12, "NET_RAW": 13, "PERFMON": 38, "BPF": 39}

// awaitLeader waits until a pod of the controller Deployment running image ref on the node
// holds the leader Lease (identity <pod>@<node>), acquired after since, and returns when it
// acquired it.
func awaitLeader(ctx context.Context, t *testing.T, l *lab.Lab, node, ref string, since time.Time) time.Time {
	t.Helper()
	var acquired time.Time
	err := poll.Until(ctx, "Lease egressd/"+leader.LeaseName+" held by egressd controller "+ref+" on "+node, 2*time.Minute, func() error {
		lease, err := l.Client.CoordinationV1().Leases("egressd").Get(ctx, leader.LeaseName, metav1.GetOptions{})
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
		pod, on, _ := strings.Cut(h, "@")
		if on != node || !strings.HasPrefix(pod, "egressd-controller-") || !at.After(since) {
			return fmt.Errorf("holder %q acquired at %s", h, at)
		}
		p, err := l.Client.CoreV1().Pods("egressd").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if img := p.Spec.Containers[0].Image; img != ref {
			return fmt.Errorf("holder %s runs %s", pod, img)
		}
		acquired = at
		return nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, controllerState(ctx, l))
	}
	return acquired
}

// agentProcesses are the node's egressd processes but the controller's replicas (egressd
// controller), which the Deployment may run there too.
func agentProcesses(n *node.Node) []int {
	var out []int
	for _, pid := range n.Processes("egressd") {
		argv, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		if args := strings.Split(string(argv), "\x00"); len(args) > 1 && args[1] == "controller" {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// controllerState says where the controller Deployment's pods are: its status, its pods'
// phases and conditions, and the namespace's warning events.
func controllerState(ctx context.Context, l *lab.Lab) string {
	var b strings.Builder
	if d, err := l.Client.AppsV1().Deployments("egressd").Get(ctx, "egressd-controller", metav1.GetOptions{}); err != nil {
		fmt.Fprintf(&b, "Deployment egressd-controller: %v\n", err)
	} else {
		fmt.Fprintf(&b, "Deployment egressd-controller: %+v\n", d.Status)
	}
	if pods, err := l.Client.CoreV1().Pods("egressd").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=egressd-controller"}); err == nil {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "pod %s on %q: %s %+v %+v\n", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
		}
	}
	if evs, err := l.Client.CoreV1().Events("egressd").List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"}); err == nil {
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "event %s %s/%s: %s\n", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
		}
	}
	return b.String()
}

// awaitChained waits until the node's CNI list ends with egressd-cni (the agent installed it),
// or, with want false, no longer has it (the cleanup removed it).
func awaitChained(t *testing.T, n *node.Node, want bool) {
	t.Helper()
	awaitCNI(t, n, want, want)
}

// awaitCNI waits until egressd-cni is chained in the node's conflist, and its binary installed,
// as wanted.
func awaitCNI(t *testing.T, n *node.Node, chain, binary bool) {
	t.Helper()
	file := filepath.Join(n.CNIConfDir(), "10-realnode.conflist")
	poll.Eventually(t, fmt.Sprintf("egressd-cni chained %v (binary %v) in %s", chain, binary, file), 30*time.Second, func() error {
		l, err := libcni.ConfListFromFile(file)
		if err != nil {
			return err
		}
		chained := len(l.Plugins) == 2 && l.Plugins[1].Network.Type == "egressd-cni"
		_, binErr := os.Stat(filepath.Join(n.CNIBinDir(), "egressd-cni"))
		if chained != chain || (binErr == nil) != binary {
			return fmt.Errorf("%d plugins, last %s; binary: %v", len(l.Plugins), l.Plugins[len(l.Plugins)-1].Network.Type, binErr)
		}
		return nil
	})
}
