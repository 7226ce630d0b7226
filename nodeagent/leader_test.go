package nodeagent

import (
	"context"
	"testing"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// fakeLock is a Lease held by holder; Update records what was written.
type fakeLock struct {
	resourcelock.Interface
	holder  string
	written []resourcelock.LeaderElectionRecord
}

func (f *fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return &resourcelock.LeaderElectionRecord{HolderIdentity: f.holder}, nil, nil
}

func (f *fakeLock) Update(_ context.Context, rec resourcelock.LeaderElectionRecord) error {
	f.written = append(f.written, rec)
	return nil
}

func (f *fakeLock) Identity() string { return "node-a" }

// A release (empty holder) is written only while the Lease still names this agent; renewals
// are never held back.
func TestReleaseGuard(t *testing.T) {
	ctx := context.Background()
	taken := &fakeLock{holder: "node-b"}
	if err := (releaseGuard{taken}).Update(ctx, resourcelock.LeaderElectionRecord{}); err == nil || len(taken.written) != 0 {
		t.Errorf("released a Lease node-b holds: err %v, written %v", err, taken.written)
	}
	if err := (releaseGuard{taken}).Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "node-a"}); err != nil || len(taken.written) != 1 {
		t.Errorf("an update naming us was held back: %v", err)
	}
	ours := &fakeLock{holder: "node-a"}
	if err := (releaseGuard{ours}).Update(ctx, resourcelock.LeaderElectionRecord{}); err != nil || len(ours.written) != 1 {
		t.Errorf("did not release our own Lease: err %v, written %v", err, ours.written)
	}
}
