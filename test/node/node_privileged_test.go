package node_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/node"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedNodeRunsPod starts a real node, runs a pod on it through the API server, with an
// address from the node's CNI, and checks that closing the node leaves no process, mount
// namespace, cgroup or Node behind.
func TestPrivilegedNodeRunsPod(t *testing.T) {
	privileged.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bins, err := node.Build(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{Log: os.Stderr, Scheduler: bins.Scheduler})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	l, err := lab.Start(ctx, cp, lab.Options{Nodes: 1, Kubelets: []int{0}, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	plugins, err := lab.ReferencePlugins(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := node.LabImages(os.Stderr, bins.OCIImage, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Start(ctx, node.Options{Lab: l, Node: l.Nodes[0], Bins: bins, CNIPlugins: []string{plugins},
		PauseImage: node.PauseRef, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			n.Close()
		}
	})
	if err := n.Import(imgs...); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stream", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: n.Name,
			Containers: []corev1.Container{{Name: "labpod", Image: node.PodRef, ImagePullPolicy: corev1.PullNever,
				Args: []string{"-for", "1s", "192.0.2.1:9"}}},
		},
	}
	if _, err := l.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = poll.Until(ctx, "pod default/stream running with an IP", 40*time.Second, func() error {
		p, err := l.Client.CoreV1().Pods("default").Get(ctx, "stream", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.PodIPs) != 2 || !l.Nodes[0].PodV4.Contains(netip.MustParseAddr(p.Status.PodIPs[0].IP)) {
			return fmt.Errorf("phase %s, IPs %v, %v", p.Status.Phase, p.Status.PodIPs, p.Status.ContainerStatuses)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\nkubelet:\n%s\ncontainerd:\n%s", err, n.LogTail("kubelet", 30), n.LogTail("containerd", 30))
	}
	n.Close()
	closed = true
	if left := n.Leftovers(); len(left) > 0 {
		t.Errorf("after Close: %v", left)
	}
	if _, err := l.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{}); err == nil {
		t.Errorf("Node %s still exists after Close", n.Name)
	}
}
