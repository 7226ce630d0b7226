package nodeagent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// A CNI setting that undoes what egressd programs makes one Warning Event on the Node, naming
// the program, the setting, how many places and the effect; again only when what is found
// changes, never when nothing is.
func TestReportConflictsEventsOnTheNode(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	l := newLoop(&recordingApplier{}, make(chan struct{}), 0, func(_ *Config, d *Deps) {
		d.Snapshot, d.Recorder = watcherstest.Snapshot(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}), rec
	})
	mark := dataplane.Conflict{Program: "cil_from_container", Setting: "enable_identity_mark", Effect: "overwrites the mark", Of: "pod interfaces"}
	routing := dataplane.Conflict{Program: "cil_from_container", Setting: "enable_bpf_host_routing", Effect: "redirects past routing", Of: "pod interfaces"}
	for _, step := range []struct {
		found map[dataplane.Conflict]int
		want  string // the event, "" none
	}{
		{nil, ""},
		{map[dataplane.Conflict]int{mark: 2}, "Warning CNIConflict a CNI's program on egressd's path undoes what egressd programs for EgressIP, external gateways and EgressService: " +
			"cil_from_container with enable_identity_mark on 2 pod interfaces overwrites the mark (docs/compat.md)"},
		{map[dataplane.Conflict]int{mark: 2}, ""},
		{map[dataplane.Conflict]int{mark: 3, routing: 1}, "Warning CNIConflict a CNI's program on egressd's path undoes what egressd programs for EgressIP, external gateways and EgressService: " +
			"cil_from_container with enable_bpf_host_routing on 1 pod interfaces redirects past routing; cil_from_container with enable_identity_mark on 3 pod interfaces overwrites the mark (docs/compat.md)"},
		{nil, ""},
	} {
		l.reportConflicts(step.found)
		got := ""
		select {
		case got = <-rec.Events:
		default:
		}
		if got != step.want {
			t.Errorf("found %v: event %q, want %q", step.found, got, step.want)
		}
	}
}
