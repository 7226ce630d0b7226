package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/egressd/egressd/test/kube"
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
func egressctl(t *testing.T) string {
	t.Helper()
	ctlOnce.Do(func() {
		dir, err := os.MkdirTemp("", "egressctl-")
		if err != nil {
			ctlErr = err
			return
		}
		ctlPath = filepath.Join(dir, "egressctl")
		if out, err := exec.Command("go", "build", "-o", ctlPath, "../../cmd/egressctl").CombinedOutput(); err != nil {
			ctlErr = &buildError{err, string(out)}
		}
	})
	if ctlErr != nil {
		t.Fatal(ctlErr)
	}
	return ctlPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "build egressctl: " + e.err.Error() + "\n" + e.out }
