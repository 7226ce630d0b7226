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

// apply creates or updates the objects of a YAML document in ns, as kubectl apply would.
func apply(t *testing.T, l *lab.Lab, ns, doc string) {
	t.Helper()
	if err := l.Kube.Apply(context.Background(), ns, doc); err != nil {
		t.Fatal(err)
	}
}

// applyAndWait applies a one-object YAML document and waits until the object's status.status
// reads want (fwApplied, qosApplied: every node reported it applied). Made for a new object:
// an updated one may still show the status of its previous spec, so wait for the behaviour
// the update changes instead.
func applyAndWait(t *testing.T, l *lab.Lab, ns, doc, want string) {
	t.Helper()
	apply(t, l, ns, doc)
	objs, err := kube.Decode(doc)
	if err != nil || len(objs) != 1 {
		t.Fatalf("applyAndWait takes one object: %d (%v)", len(objs), err)
	}
	o := objs[0]
	if err := l.Kube.WaitField(context.Background(), o.GetAPIVersion(), o.GetKind(), ns, o.GetName(), "status.status", want, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// applyFirewall applies an EgressFirewall and waits until every node reports it applied.
func applyFirewall(t *testing.T, l *lab.Lab, ns, doc string) {
	t.Helper()
	applyAndWait(t, l, ns, doc, fwApplied)
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
