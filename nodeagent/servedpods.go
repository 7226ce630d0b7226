package nodeagent

import (
	"context"
	"slices"
	"time"

	"github.com/egressd/egressd/watchers"
)

// servePodsWait bounds a sync's wait for the pods of new scopes, but the first's: past it, the
// sync compiles without them (an egress node then drops, rather than SNATs, the steered
// traffic of the new pods it does not know yet) and their arrival triggers the next one. The
// first sync of an agent waits for them all, as for its other caches: what an earlier agent
// programmed for them stays until then. Later syncs carry every other change too: at the
// scale harness's size, with the API server busy, 10 s held an EgressFirewall's edit behind
// each EgressIP the controller assigned. A second covers a scope's fill on a healthy server.
const servePodsWait = time.Second

// servePods caches the other nodes' pods the features read, before they compile: the scopes
// each podReader names for this node, nothing else. When a feature cannot name them, the
// scopes stay as they were.
func (l *SyncLoop) servePods(ctx context.Context) {
	if l.deps.ServePods == nil {
		return
	}
	var scopes []watchers.PodScope
	for _, f := range l.features {
		r, ok := f.(podReader)
		if !ok {
			continue
		}
		s, err := r.servedPods(l.deps.Snapshot, l.cfg.Node)
		if err != nil {
			l.deps.Log.Error("find the other nodes' pods to read; reading the same as before", "feature", f.name(), "err", err)
			return
		}
		scopes = append(scopes, s...)
	}
	slices.SortFunc(scopes, watchers.PodScope.Compare)
	scopes = slices.Compact(scopes)
	if !slices.Equal(scopes, l.served) {
		l.deps.Log.Info("reading other nodes' pods", "scopes", len(scopes), "first", scopes[:min(len(scopes), 8)])
	}
	l.served = scopes
	l.deps.Metrics.ServedPodScopes.Set(float64(len(scopes)))
	wait, cancel := ctx, context.CancelFunc(func() {})
	if l.synced.Load() {
		wait, cancel = context.WithTimeout(ctx, servePodsWait)
	}
	defer cancel()
	if err := l.deps.ServePods(wait, scopes); err != nil {
		l.deps.Log.Error("read other nodes' pods", "err", err)
	}
}
