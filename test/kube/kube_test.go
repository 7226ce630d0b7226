package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
	if err == nil || !strings.Contains(err.Error(), "status.status unset") {
		t.Fatalf("unset status: %v", err)
	}
	err = c.WaitField(ctx, "v1", "ConfigMap", ns, "a", "data.k", "v2", 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), `data.k = "v1"`) {
		t.Fatalf("other value: %v", err)
	}

	// Applying again updates in place: a changed value, a field the document no longer sets
	// removed, the object's status (written by someone else) kept.
	qos, err := c.Get(ctx, "k8s.ovn.org/v1", "EgressQoS", ns, "default")
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(qos.Object, "EgressQoS Rules applied", "status", "status"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateStatus(ctx, qos); err != nil {
		t.Fatal(err)
	}
	err = c.Apply(ctx, ns, `
apiVersion: v1
kind: ConfigMap
metadata: {name: a}
data: {k: v2}
---
apiVersion: k8s.ovn.org/v1
kind: EgressQoS
metadata: {name: default}
spec: {egress: [{dscp: 10, dstCIDR: 192.0.2.0/24}]}`)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"spec.egress": "[map[dscp:10 dstCIDR:192.0.2.0/24]]", "status.status": "EgressQoS Rules applied"} {
		if err := c.WaitField(ctx, "k8s.ovn.org/v1", "EgressQoS", ns, "default", path, want, time.Second); err != nil {
			t.Error(err)
		}
	}
	if err := c.WaitField(ctx, "v1", "ConfigMap", ns, "a", "data.k", "v2", time.Second); err != nil {
		t.Error(err)
	}
	if err := c.Apply(ctx, ns, "apiVersion: v1\nkind: NoSuchKind\nmetadata: {name: x}\n"); err == nil || !strings.Contains(err.Error(), "NoSuchKind x") {
		t.Errorf("unknown kind: %v", err)
	}
}
