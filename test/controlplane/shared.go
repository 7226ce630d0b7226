package controlplane

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

var (
	sharedOnce sync.Once
	shared     *ControlPlane
	sharedErr  error
)

// Main runs a test binary's tests and stops the shared control plane afterwards.
// Use it from TestMain: func TestMain(m *testing.M) { controlplane.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Stop()
	}
	os.Exit(code)
}

// Shared returns the control plane shared by all tests of this test binary, starting it on first
// use (the binary's TestMain must call Main so that it is stopped).
func Shared(t testing.TB) *ControlPlane {
	t.Helper()
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		shared, sharedErr = Start(ctx, Options{Log: os.Stderr})
	})
	if sharedErr != nil {
		t.Fatalf("control plane: %v", sharedErr)
	}
	return shared
}

// Namespace creates a fresh namespace for one test and deletes it when the test ends.
func (cp *ControlPlane) Namespace(t testing.TB) string {
	t.Helper()
	client := cp.Client(t)
	ns, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// Client returns an admin clientset.
func (cp *ControlPlane) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return c
}

// String describes the control plane for logs.
func (cp *ControlPlane) String() string {
	return fmt.Sprintf("control plane %s (%s)", cp.Server, cp.Dir)
}
