package egressip

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	ovnfake "github.com/egressd/egressd/api/generated/clientset/versioned/fake"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// proberLike behaves as reachability.Prober does: a node counts as reachable once it is among
// the probed targets (a new target starts reachable, within its grace), and not before.
type proberLike struct {
	targets map[string]netip.AddrPort
	down    map[string]bool
}

func (p *proberLike) Set(t map[string]netip.AddrPort) { p.targets = t }
func (p *proberLike) Reachable(n string) bool {
	_, ok := p.targets[n]
	return ok && !p.down[n]
}
func (p *proberLike) Changed() <-chan struct{} { return nil }

func assignableNode(name, primary string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{AssignableLabel: ""},
		Annotations: map[string]string{cluster.PrimaryIfAddrAnnotation: `{"ipv4":"` + primary + `"}`}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

// A new leader's prober starts empty: its first reconcile must keep the assignments it finds
// (no reassignment storm, no gap in the egress nodes' SNAT), and still move an IP off a node
// its probes then find unreachable.
func TestControllerNewLeaderKeepsAssignments(t *testing.T) {
	e := eip("a", 0, ips("10.0.0.100", "10.0.0.101"), "10.0.0.100@n1", "10.0.0.101@n2")
	e.Annotations = map[string]string{MarkAnnotation: "50000"}
	objs := []runtime.Object{e, assignableNode("n1", "10.0.0.1/24"), assignableNode("n2", "10.0.0.2/24"), assignableNode("n3", "10.0.0.3/24")}
	client := ovnfake.NewSimpleClientset(e)
	probes := &proberLike{down: map[string]bool{}}
	c := &Controller{Client: client, Snapshot: watcherstest.Snapshot(objs...), Probes: probes, HealthPort: 9107,
		Recorder: record.NewFakeRecorder(10), Log: slog.New(slog.DiscardHandler), recorded: map[Event]bool{}, Metrics: NewMetrics()}
	ctx := context.Background()
	c.reconcile(ctx)
	for _, a := range client.Actions() {
		if a.GetVerb() == "update" || a.GetVerb() == "patch" {
			t.Fatalf("a new leader's first reconcile wrote the EgressIP (%v): it cleared assignments it had no reason to", a)
		}
	}

	probes.down["n1"] = true
	client.ClearActions()
	c.reconcile(ctx)
	// The write is a merge patch of status.items alone (deploy/node-policy.yaml refuses an agent
	// any other change of an EgressIP).
	var writes []string
	for _, a := range client.Actions() {
		switch p := a.(type) {
		case k8stesting.PatchAction:
			writes = append(writes, fmt.Sprintf("%s %s", p.GetPatchType(), p.GetPatch()))
		case k8stesting.UpdateAction:
			writes = append(writes, "update")
		}
	}
	if want := `application/merge-patch+json {"status":{"items":[{"node":"n2","egressIP":"10.0.0.101"},{"node":"n3","egressIP":"10.0.0.100"}]}}`; len(writes) != 1 || writes[0] != want {
		t.Errorf("writes after n1 turned unreachable: %q, want [%s]", writes, want)
	}
	got, err := client.K8sOVNV1().EgressIPs().Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []ovnv1.EgressIPStatusItem{{Node: "n2", EgressIP: "10.0.0.101"}, {Node: "n3", EgressIP: "10.0.0.100"}}
	if !slices.Equal(got.Status.Items, want) {
		t.Errorf("after n1 turned unreachable: %v, want %v", got.Status.Items, want)
	}
	var m dto.Metric
	if err := c.Metrics.Reassignment.Write(&m); err != nil || m.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("reassignments observed: %v (%v), want the one move off n1", m.GetHistogram().GetSampleCount(), err)
	}
}

// A lasting condition is recorded once; once it cleared, its return is recorded again (upstream
// records at every reconcile; the first Event may have expired long since).
func TestControllerRecordsAReturningCondition(t *testing.T) {
	e := eip("a", 0, ips("10.0.0.100"))
	n1 := assignableNode("n1", "10.0.0.1/24")
	client := ovnfake.NewSimpleClientset(e)
	probes := &proberLike{down: map[string]bool{"n1": true}}
	rec := record.NewFakeRecorder(10)
	c := &Controller{Client: client, Snapshot: watcherstest.Snapshot(e, n1), Probes: probes, HealthPort: 9107,
		Recorder: rec, Log: slog.New(slog.DiscardHandler), recorded: map[Event]bool{}, Metrics: NewMetrics()}
	ctx := context.Background()
	events := func() (out []string) {
		for {
			select {
			case ev := <-rec.Events:
				out = append(out, ev)
			default:
				return out
			}
		}
	}
	c.reconcile(ctx)
	c.reconcile(ctx)
	if got := events(); len(got) != 1 {
		t.Fatalf("no node for the IP, two reconciles: events %q, want one", got)
	}
	probes.down["n1"] = false
	c.reconcile(ctx)
	if got := events(); len(got) != 0 {
		t.Fatalf("the IP assigned: events %q, want none", got)
	}
	probes.down["n1"] = true
	c.reconcile(ctx)
	if got := events(); len(got) != 1 {
		t.Errorf("the node lost again: events %q, want the condition recorded again", got)
	}
}

// A controller that reaches no probed node takes itself for isolated: it moves nothing (every
// node unreachable at once is far likelier its own network than all of theirs); once one
// answers again, it assigns as before.
func TestControllerIsolatedMovesNothing(t *testing.T) {
	// n3 runs the controller: it answers, whatever the controller's network.
	e := eip("a", 0, ips("10.0.0.100"), "10.0.0.100@n1")
	objs := []runtime.Object{e, assignableNode("n1", "10.0.0.1/24"), assignableNode("n2", "10.0.0.2/24"), assignableNode("n3", "10.0.0.3/24")}
	client := ovnfake.NewSimpleClientset(e)
	probes := &proberLike{down: map[string]bool{"n1": true, "n2": true}}
	c := &Controller{Client: client, Snapshot: watcherstest.Snapshot(objs...), Probes: probes, HealthPort: 9107, Self: "n3",
		Recorder: record.NewFakeRecorder(10), Log: slog.New(slog.DiscardHandler), recorded: map[Event]bool{}}
	ctx := context.Background()
	c.reconcile(ctx)
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" || a.GetVerb() == "update" {
			t.Fatalf("an isolated controller wrote the EgressIP: %v", a)
		}
	}
	probes.down["n2"] = false
	c.reconcile(ctx)
	got, err := client.K8sOVNV1().EgressIPs().Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []ovnv1.EgressIPStatusItem{{Node: "n2", EgressIP: "10.0.0.100"}}; !slices.Equal(got.Status.Items, want) {
		t.Errorf("n2 answering again: %v, want %v", got.Status.Items, want)
	}
}
