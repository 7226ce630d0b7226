package nodeagent

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// Objects count compiled objects by result; failures carry their kind of reason (never the
// error's text), also those of objects the dataplane failed that have no status of their own
// here.
func TestObserveObjects(t *testing.T) {
	m := NewMetrics()
	fw := dataplane.Origin{Kind: "EgressFirewall", Namespace: "a", Name: "default"}
	qos := dataplane.Origin{Kind: "EgressQoS", Namespace: "a", Name: "default"}
	eip := dataplane.Origin{Kind: "EgressIP", Name: "eip"}
	m.observeObjects(cluster.NewOutcomes(cluster.NewShared(map[dataplane.Origin]error{fw: nil, qos: errors.New("bad dscp")})),
		map[dataplane.Origin]error{eip: errors.New("address 192.0.2.100: no interface")}, map[dataplane.Origin]bool{qos: true})
	want := `# HELP egressd_object_failure 1 per API object the last sync failed to program on this node, by reason: invalid (it did not compile: the node keeps enforcing its previous rules), dataplane (the kernel refused part of it). The error itself is in the object's status, its Events and the agent's log.
# TYPE egressd_object_failure gauge
egressd_object_failure{kind="EgressIP",object="eip",reason="dataplane"} 1
egressd_object_failure{kind="EgressQoS",object="a/default",reason="invalid"} 1
# HELP egressd_objects API objects the last sync programmed on this node, by kind and result (applied, failed).
# TYPE egressd_objects gauge
egressd_objects{kind="EgressFirewall",result="applied"} 1
egressd_objects{kind="EgressIP",result="failed"} 1
egressd_objects{kind="EgressQoS",result="failed"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "egressd_objects", "egressd_object_failure"); err != nil {
		t.Error(err)
	}
	// A later sync replaces them: nothing of the former failures remains.
	m.observeObjects(cluster.NewOutcomes(cluster.NewShared(map[dataplane.Origin]error{fw: nil})), nil, nil)
	if n := testutil.CollectAndCount(m.ObjectFailures); n != 0 {
		t.Errorf("%d failures left after a sync without any", n)
	}
}
