package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
)

func TestMain(m *testing.M) { controlplane.Main(m) }

func TestApplyGetWaitField(t *testing.T) {
	cp := controlplane.Shared(t)
	ns := cp.Namespace(t)
	c, err := kube.NewClient(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err = c.Apply(ctx, ns, `
apiVersion: v1
kind: ConfigMap
metadata: {name: a}
data: {k: v1}
---
apiVersion: k8s.ovn.org/v1
kind: EgressQoS
metadata: {name: default}
spec: {egress: [{dscp: 46}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitField(ctx, "v1", "ConfigMap", ns, "a", "data.k", "v1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	err = c.WaitField(ctx, "k8s.ovn.org/v1", "EgressQoS", ns, "default", "status.status", "EgressQoS Rules applied", 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), `status.status = "<unset>"`) {
		t.Fatalf("unset status: %v", err)
	}
}
