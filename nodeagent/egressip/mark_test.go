package egressip

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	ovnfake "github.com/egressd/egressd/api/generated/clientset/versioned/fake"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/watchers/watcherstest"
)

func marked(name, mark string) *ovnv1.EgressIP {
	e := eip(name, 0, ips("10.0.0.100"))
	if mark != "" {
		e.Annotations = map[string]string{MarkAnnotation: mark}
	}
	return e
}

// A valid mark is kept; a missing, invalid or duplicate one (the later by name) gets the
// lowest free mark of upstream's range; a mark written but not yet in the cache holds.
func TestMarkChanges(t *testing.T) {
	eips := []*ovnv1.EgressIP{marked("e", ""), marked("a", "50000"), marked("b", "50000"), marked("c", "60000"),
		marked("d", "x"), marked("f", "50002"), marked("g", "")}
	got := markChanges(eips, map[string]int{"e": 50003})
	want := []markChange{{"b", 50001}, {"c", 50004}, {"d", 50005}, {"g", 50006}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mark changes %v, want %v", got, want)
	}
	full := []*ovnv1.EgressIP{marked("new", "")}
	for m := MarkMin; m <= MarkMax; m++ {
		full = append(full, marked(fmt.Sprintf("m%d", m), ""))
	}
	if n := len(markChanges(full, nil)); n != MarkMax-MarkMin+1 {
		t.Errorf("%d marks for %d EgressIPs, want the %d of upstream's range", n, len(full), MarkMax-MarkMin+1)
	}
}

// The leader annotates an EgressIP without a mark as upstream's cluster-manager does, with a
// merge patch of that annotation alone, once.
func TestControllerWritesMark(t *testing.T) {
	e := eip("a", 0, ips("10.0.0.100"), "10.0.0.100@n1")
	objs := []runtime.Object{e, assignableNode("n1", "10.0.0.1/24")}
	client := ovnfake.NewSimpleClientset(e)
	c := &Controller{Client: client, Snapshot: watcherstest.Snapshot(objs...), Probes: &proberLike{down: map[string]bool{}}, HealthPort: 9107,
		Recorder: record.NewFakeRecorder(10), Log: slog.New(slog.DiscardHandler), recorded: map[Event]bool{}}
	ctx := context.Background()
	c.reconcile(ctx)
	c.reconcile(ctx) // the cache still without the annotation: the same mark, no second write
	var patches []string
	for _, a := range client.Actions() {
		if p, ok := a.(interface{ GetPatch() []byte }); ok {
			patches = append(patches, string(p.GetPatch()))
		}
	}
	if want := `{"metadata":{"annotations":{"k8s.ovn.org/egressip-mark":"50000"}}}`; len(patches) != 1 || patches[0] != want {
		t.Errorf("patches %q, want [%s]", patches, want)
	}
	got, err := client.K8sOVNV1().EgressIPs().Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[MarkAnnotation] != "50000" {
		t.Errorf("annotations %v, want %s=50000", got.Annotations, MarkAnnotation)
	}
}
