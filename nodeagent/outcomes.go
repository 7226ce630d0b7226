package nodeagent

import (
	"fmt"
	"slices"
	"strings"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// firewallNotes are the notes on the EgressFirewalls of namespaces whose pods' DNS answers
// are no longer learned (capped: why, by namespace).
func firewallNotes(objects cluster.Outcomes, capped map[string]string) map[dataplane.Origin]string {
	if len(capped) == 0 {
		return nil
	}
	notes := map[dataplane.Origin]string{}
	for o, err := range objects.All() {
		if why, ok := capped[o.Namespace]; ok && o.Kind == cluster.KindEgressFirewall && err == nil {
			notes[o] = why
		}
	}
	return notes
}

// blamePods reports what failed for a local pod (its interface not found, the classifier not
// attached) in the status of the policies of its namespace: they are not in force for it. The
// pods are named in order, on one line with what else failed, as upstream prints several errors
// ("[e1, e2]"): a status message is one line, and the same failures make the same message.
func blamePods(objects cluster.Outcomes, failed map[dataplane.Origin]error) {
	var pods []dataplane.Origin
	for o := range failed {
		if o.Kind == cluster.KindPod {
			pods = append(pods, o)
		}
	}
	if len(pods) == 0 {
		return
	}
	slices.SortFunc(pods, func(a, b dataplane.Origin) int { return strings.Compare(a.Name, b.Name) })
	blamed := map[dataplane.Origin]error{} // set after the walk, which they would change
	for o, err := range objects.All() {
		if o.Kind != cluster.KindEgressFirewall && o.Kind != cluster.KindEgressQoS {
			continue
		}
		errs := flatten(err)
		named := false
		for _, pod := range pods {
			if pod.Namespace != o.Namespace {
				continue
			}
			named = true
			for _, err := range flatten(failed[pod]) {
				errs = append(errs, fmt.Errorf("pod %s: %w", pod.Name, err))
			}
		}
		if named {
			blamed[o] = utilerrors.NewAggregate(errs)
		}
	}
	for o, err := range blamed {
		objects.Set(o, err)
	}
}

// flatten lists the errors err holds: those joined (errors.Join) or aggregated, recursively.
func flatten(err error) []error {
	var inner []error
	switch e := err.(type) {
	case nil:
		return nil
	case utilerrors.Aggregate:
		inner = e.Errors()
	case interface{ Unwrap() []error }:
		inner = e.Unwrap()
	default:
		return []error{err}
	}
	var out []error
	for _, x := range inner {
		out = append(out, flatten(x)...)
	}
	return out
}

// applyFailed reports whether the dataplane failed something that compiled: that is worth
// retrying, whereas an object that does not compile fails the same way until it changes.
func applyFailed(compiled cluster.Outcomes, failed map[dataplane.Origin]error) bool {
	for o := range failed {
		if err, _ := compiled.Get(o); err == nil {
			return true
		}
	}
	return false
}

func (l *SyncLoop) logFailures(failed map[dataplane.Origin]error) {
	failing := map[dataplane.Origin]string{}
	for origin, err := range failed {
		l.deps.Metrics.SyncErrors.WithLabelValues("apply").Inc()
		failing[origin] = err.Error()
		if l.failing[origin] != err.Error() {
			l.deps.Log.Error("apply failed", "object", origin.String(), "err", err)
			for _, f := range l.features {
				if w, ok := f.(applyWatcher); ok {
					w.applyFailed(origin, err)
				}
			}
		}
	}
	for origin := range l.failing {
		if _, still := failing[origin]; !still {
			l.deps.Log.Info("applied again", "object", origin.String())
		}
	}
	l.failing = failing
}
