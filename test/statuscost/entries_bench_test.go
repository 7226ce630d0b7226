// Package statuscost measures what per-node status entries cost the API server as a cluster
// grows: every node's agent writes its own entry of every EgressFirewall ("<node>:
// EgressFirewall Rules applied"), as OVN-Kubernetes' zones do, so an object of an N-node
// cluster takes N writes, each of an object that holds up to N entries. The scale harness runs
// two real agents and cannot show it. Run with: make bench-status.
package statuscost

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	ovnac "github.com/egressd/egressd/api/generated/applyconfiguration/k8sovn/v1"
	"github.com/egressd/egressd/api/generated/clientset/versioned"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/test/controlplane"
)

func TestMain(m *testing.M) { controlplane.Main(m) }

// entry is node i's success entry, under a node name as long as a cloud's.
func entry(i int) (node, msg string) {
	node = fmt.Sprintf("ip-10-0-%d-%d.ec2.internal", i/250, i%250)
	return node, node + ": EgressFirewall Rules applied"
}

// writers are the two ways a node can write its entry into status.messages, a set list.
var writers = map[string]func(ctx context.Context, c versioned.Interface, ns string, i int) error{
	// apply: server-side apply as the node's own field manager, as egressd's agents and
	// upstream's zones write it; each node's managedFields entry rides along in the object.
	"apply": func(ctx context.Context, c versioned.Interface, ns string, i int) error {
		node, msg := entry(i)
		ac := ovnac.EgressFirewall("default", ns).WithStatus(ovnac.EgressFirewallStatus().WithMessages(msg))
		_, err := c.K8sOVNV1().EgressFirewalls(ns).ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: node, Force: true})
		return err
	},
	// patch: a JSON patch that appends the entry, every node as one field manager: the
	// cheapest write that keeps each node's entry in the object.
	"patch": func(ctx context.Context, c versioned.Interface, ns string, i int) error {
		_, msg := entry(i)
		patch, err := json.Marshal([]map[string]string{{"op": "add", "path": "/status/messages/-", "value": msg}})
		if err != nil {
			return err
		}
		_, err = c.K8sOVNV1().EgressFirewalls(ns).Patch(ctx, "default", types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "egressd"}, "status")
		return err
	},
}

// BenchmarkNodeEntries: one more node's entry written into an EgressFirewall that already
// holds the entries of N nodes, one write at a time (agents writing at once only add the API
// server's retries of conflicting updates). Reports the time of one write, the object's size,
// and the API server's time for all N nodes' entries of one object (the sum of the writes that
// filled it).
func BenchmarkNodeEntries(b *testing.B) {
	cp := controlplane.Shared(b)
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = -1, 0 // unthrottled: the API server's time, not the client's rate
	c := versioned.NewForConfigOrDie(cfg)
	ctx := context.Background()
	for _, how := range []string{"apply", "patch"} {
		for _, nodes := range []int{100, 500, 1000} {
			b.Run(fmt.Sprintf("%s/nodes=%d", how, nodes), func(b *testing.B) {
				write := writers[how]
				ns := cp.Namespace(b)
				ef := &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
				for i := range 10 { // the scale harness's firewall: 10 rules
					ef.Spec.Egress = append(ef.Spec.Egress, ovnv1.EgressFirewallRule{Type: "Allow",
						To: ovnv1.EgressFirewallDestination{CIDRSelector: fmt.Sprintf("10.%d.0.0/16", i)}})
				}
				if _, err := c.K8sOVNV1().EgressFirewalls(ns).Create(ctx, ef, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				if how == "patch" { // a JSON patch appends to a list that must exist
					empty := []byte(`[{"op": "add", "path": "/status", "value": {"messages": []}}]`)
					if _, err := c.K8sOVNV1().EgressFirewalls(ns).Patch(ctx, "default", types.JSONPatchType, empty, metav1.PatchOptions{FieldManager: "egressd"}, "status"); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				for i := range nodes {
					if err := write(ctx, c, ns, i); err != nil {
						b.Fatalf("node %d's entry: %v", i, err)
					}
					if (i+1)%250 == 0 {
						b.Logf("%d of %d entries written (%s)", i+1, nodes, time.Since(start).Round(time.Second))
					}
				}
				filled := time.Since(start)
				more := 0
				for b.Loop() { // the setup above runs once
					if err := write(ctx, c, ns, nodes+more); err != nil {
						b.Fatalf("node %d's entry: %v", nodes+more, err)
					}
					more++
				}
				got, err := c.K8sOVNV1().EgressFirewalls(ns).Get(ctx, "default", metav1.GetOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if len(got.Status.Messages) != nodes+more {
					b.Fatalf("%d entries in the object, want %d", len(got.Status.Messages), nodes+more)
				}
				all, _ := json.Marshal(got)
				managed, _ := json.Marshal(got.ManagedFields)
				b.ReportMetric(float64(len(all))/1024, "object-KiB")
				b.ReportMetric(float64(len(managed))/float64(len(got.Status.Messages)), "managedFields-B/node")
				b.ReportMetric(filled.Seconds(), "s-to-fill")
			})
		}
	}
}
