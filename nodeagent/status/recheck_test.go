package status

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"github.com/egressd/egressd/api/generated/clientset/versioned/fake"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// A change of some objects looks again at their entries alone; one the watchers could not
// name (all) at every entry.
func TestWriterRechecksTheChangedObjects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewSimpleClientset()
		count := firewallWrites(client)
		var efs []runtime.Object
		statuses := map[dataplane.Origin]error{}
		for _, ns := range []string{"a", "b", "c"} {
			efs = append(efs, &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}})
			statuses[dataplane.Origin{Kind: cluster.KindEgressFirewall, Namespace: ns, Name: "default"}] = nil
		}
		changed := make(chan struct{}, 1)
		var mu sync.Mutex // guards what ChangedObjects returns
		var objects []watchers.ChangedObject
		all := false
		// The snapshot never shows the entries written: every look at an entry writes it.
		w := &Writer{Node: "n1", Client: client, Snapshot: watcherstest.Snapshot(efs...), Changed: changed,
			ChangedObjects: func() ([]watchers.ChangedObject, bool) {
				mu.Lock()
				defer mu.Unlock()
				out, every := objects, all
				objects, all = nil, false
				return out, every
			},
			Recorder: record.NewFakeRecorder(10), Log: slog.New(slog.DiscardHandler)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go w.Run(ctx)
		settled := func(what string, want map[string]int) {
			t.Helper()
			time.Sleep(recheckDelay) // the fake clock: instant
			synctest.Wait()
			if writes := count(); !maps.Equal(writes, want) {
				t.Fatalf("%s: writes %v, want %v", what, writes, want)
			}
		}
		w.Report(cluster.NewOutcomes(cluster.NewShared(statuses)), nil, dataplane.Result{})
		settled("first report", map[string]int{"a": 1, "b": 1, "c": 1})

		mu.Lock()
		objects = []watchers.ChangedObject{{Kind: "EgressFirewall", Namespace: "b", Name: "default"},
			{Kind: "EgressFirewall", Namespace: "gone", Name: "default"}, {Kind: "Node", Name: "n1"}}
		mu.Unlock()
		changed <- struct{}{}
		settled("b changed", map[string]int{"a": 1, "b": 2, "c": 1})

		mu.Lock()
		all = true
		mu.Unlock()
		changed <- struct{}{}
		settled("every object changed", map[string]int{"a": 2, "b": 3, "c": 2})
	})
}
