package e2e

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/egressd/egressd/test/agent"
	"github.com/egressd/egressd/test/kube"
	"github.com/egressd/egressd/test/lab"
)

var kubeDecode = kube.Decode

func unstructuredStrings(obj map[string]any, path ...string) ([]string, bool, error) {
	return unstructured.NestedStringSlice(obj, path...)
}

func unstructuredSlice(obj map[string]any, path ...string) ([]any, bool, error) {
	return unstructured.NestedSlice(obj, path...)
}

var (
	ctlOnce sync.Once
	ctlPath string
	ctlErr  error
)

// egressctl builds cmd/egressctl once per test binary.
func egressctl(t testing.TB) string {
	t.Helper()
	ctlOnce.Do(func() {
		dir, err := os.MkdirTemp("", "egressctl-")
		if err == nil {
			ctlPath, err = agent.BuildCommand(dir, "egressctl")
		}
		ctlErr = err
	})
	if ctlErr != nil {
		t.Fatal(ctlErr)
	}
	return ctlPath
}

// applyFirewall applies an EgressFirewall and waits until every node reports it applied.
func applyFirewall(t *testing.T, l *lab.Lab, ns, doc string) {
	t.Helper()
	applyYAML(t, l, ns, doc)
	if err := l.Kube.WaitField(context.Background(), "k8s.ovn.org/v1", "EgressFirewall", ns, "default", "status.status", fwApplied, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// addExternals adds external hosts, each given as name and addresses.
func addExternals(t *testing.T, l *lab.Lab, hosts ...[]string) {
	t.Helper()
	for _, h := range hosts {
		if _, err := l.AddExternal(h[0], lab.ExternalOptions{}, h[1:]...); err != nil {
			t.Fatal(err)
		}
	}
}

// addPod adds a pod to a lab node.
func addPod(t testing.TB, n *lab.Node, ns, name string, o lab.PodOptions) *lab.Pod {
	t.Helper()
	p, err := n.AddPod(context.Background(), ns, name, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
