package egressip

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/egressd/egressd/api/generated/clientset/versioned"
	ovnfake "github.com/egressd/egressd/api/generated/clientset/versioned/fake"
	typedv1 "github.com/egressd/egressd/api/generated/clientset/versioned/typed/k8sovn/v1"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/nodeagent/leader"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// When a node holding many egress IPs fails, their EgressIPs are written together, not one
// after the other: on an API server answering in half a second,
// the last of 100 written in turn moved 50 s after the first. On the bubble's fake clock, each
// patch waits until leader.ConcurrentWrites of them are in flight (a minute at most): written in turn,
// each waits the whole minute, and the move takes an hour.
func TestControllerMovesEgressIPsTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 2 * leader.ConcurrentWrites
		objs := []runtime.Object{assignableNode("n1", "10.0.0.1/24"), assignableNode("n2", "10.0.0.2/24")}
		var eips []runtime.Object
		for i := range n {
			ip := fmt.Sprintf("10.0.0.%d", 100+i)
			e := eip(fmt.Sprintf("e%02d", i), 0, ips(ip), ip+"@n1")
			e.Annotations = map[string]string{MarkAnnotation: fmt.Sprint(50000 + i)}
			eips = append(eips, e)
		}
		together := &gatedPatches{Interface: ovnfake.NewSimpleClientset(eips...), quorum: leader.ConcurrentWrites, all: make(chan struct{})}
		c := &Controller{Client: together, Snapshot: watcherstest.Snapshot(append(objs, eips...)...),
			Probes: &proberLike{down: map[string]bool{"n1": true}}, HealthPort: 9107,
			Recorder: record.NewFakeRecorder(4 * n), Log: slog.New(slog.DiscardHandler), recorded: map[Event]bool{}}
		start := time.Now()
		c.reconcile(t.Context())
		if took := time.Since(start); took > time.Minute {
			t.Errorf("moving %d EgressIPs off a failed node took %s: written one after the other", n, took)
		}
		for i := range n {
			got, err := together.Interface.K8sOVNV1().EgressIPs().Get(t.Context(), fmt.Sprintf("e%02d", i), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Status.Items) != 1 || got.Status.Items[0].Node != "n2" {
				t.Errorf("EgressIP %s after n1 failed: %v, want its IP on n2", got.Name, got.Status.Items)
			}
		}
		if together.most > leader.ConcurrentWrites {
			t.Errorf("%d writes in flight at once, want at most %d", together.most, leader.ConcurrentWrites)
		}
	})
}

// gatedPatches holds each EgressIP patch until quorum of them are in flight, or a minute has
// passed, and counts the most in flight at once. The fake clientset serializes what its
// reactors do, so the gate stands in front of it.
type gatedPatches struct {
	versioned.Interface
	quorum int
	all    chan struct{}

	mu             sync.Mutex
	inFlight, most int
	opened         bool
}

func (g *gatedPatches) K8sOVNV1() typedv1.K8sOVNV1Interface {
	return gatedGroup{g.Interface.K8sOVNV1(), g}
}

type gatedGroup struct {
	typedv1.K8sOVNV1Interface
	g *gatedPatches
}

func (c gatedGroup) EgressIPs() typedv1.EgressIPInterface {
	return gatedEgressIPs{c.K8sOVNV1Interface.EgressIPs(), c.g}
}

type gatedEgressIPs struct {
	typedv1.EgressIPInterface
	g *gatedPatches
}

func (e gatedEgressIPs) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*ovnv1.EgressIP, error) {
	g := e.g
	g.mu.Lock()
	g.inFlight++
	g.most = max(g.most, g.inFlight)
	if g.inFlight == g.quorum && !g.opened {
		close(g.all)
		g.opened = true
	}
	g.mu.Unlock()
	select {
	case <-g.all:
	case <-time.After(time.Minute):
	}
	defer func() { g.mu.Lock(); g.inFlight--; g.mu.Unlock() }()
	return e.EgressIPInterface.Patch(ctx, name, pt, data, opts, sub...)
}
