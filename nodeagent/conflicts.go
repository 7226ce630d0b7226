package nodeagent

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/egressd/egressd/dataplane"
)

// reasonCNIConflict is the reason of the node Event that a CNI's setting undoes what egressd
// programs.
const reasonCNIConflict = "CNIConflict"

// reportConflicts warns, in the log and in an Event on the node, when the CNI settings that
// undo what egressd programs change to some: the EgressIP, external gateway and EgressService
// traffic they touch is not steered, or its replies are dropped.
func (l *SyncLoop) reportConflicts(conflicts map[dataplane.Conflict]int) {
	var parts []string
	for _, c := range slices.SortedFunc(maps.Keys(conflicts), func(a, b dataplane.Conflict) int {
		return cmp.Or(cmp.Compare(a.Program, b.Program), cmp.Compare(a.Setting, b.Setting))
	}) {
		parts = append(parts, fmt.Sprintf("%s with %s on %d %s %s", c.Program, c.Setting, conflicts[c], c.Of, c.Effect))
	}
	said := strings.Join(parts, "; ")
	if said == l.conflicts {
		return
	}
	l.conflicts = said
	if said == "" {
		return
	}
	msg := "a CNI's program on egressd's path undoes what egressd programs for EgressIP, external gateways and EgressService: " + said + " (docs/compat.md)"
	l.deps.Log.Warn(msg)
	if l.deps.Recorder == nil {
		return
	}
	if node, err := l.deps.Snapshot.Nodes.Get(l.cfg.Node); err == nil {
		l.deps.Recorder.Event(node, corev1.EventTypeWarning, reasonCNIConflict, msg)
	}
}
