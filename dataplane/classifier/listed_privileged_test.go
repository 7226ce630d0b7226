package classifier_test

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/classifier"
)

// TestPrivilegedClassifierListsFollowChanges: the maps made from one list alone (cluster
// networks, exempt destinations, frontends, QoS rule texts) are left alone while their list
// stays the same, in fresh slices as every sync makes them, and follow each change, also back
// to a list written two applies before.
func TestPrivilegedClassifierListsFollowChanges(t *testing.T) {
	c := load(t)
	in, err := classifier.Inspect(fmt.Sprintf("/sys/fs/bpf/egressd-test-classifier-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	web := netip.MustParseAddr("203.0.113.1")
	state := func(exemptNode, noClusterV4 bool, frontend bool, qosText string) *dataplane.ClassifierState {
		st := steerState() // fresh slices, equal content
		if !exemptNode {
			st.SteerExempt = slices.Clone(st.ClusterNetworks)
		}
		if noClusterV4 {
			st.ClusterNetworks = pfxs("fd00:10:244::/48", "10.96.0.0/16")
		}
		if frontend {
			st.Frontends = []dataplane.Frontend{{Addr: web, Port: dataplane.Port{Protocol: 6, Port: 443}}}
		}
		st.Pods[1].QoSRules = []int{0}
		st.QoS = []dataplane.QoS{{Origin: dataplane.Origin{Kind: "EgressQoS", Namespace: "b", Name: "default"},
			Rules: []dataplane.QoSRule{{Index: 0, DSCP: 46, Prefixes: pfxs("0.0.0.0/0"), Text: qosText}}}}
		return st
	}
	check := func(step string, exemptNode, noClusterV4, frontend bool, qosText string) {
		t.Helper()
		if failed := c.Apply(state(exemptNode, noClusterV4, frontend, qosText), nil, nil); len(failed) > 0 {
			t.Fatalf("%s: %v", step, failed)
		}
		nodeMark := uint32(0)
		if !exemptNode {
			nodeMark = 0x00020000
		}
		clusterVerdict, frontVerdict, frontMark := uint32(tcxNext), uint32(tcxDrop), uint32(0)
		if noClusterV4 { // pod A's firewall denies what it does not allow
			clusterVerdict = tcxDrop
		}
		if frontend {
			frontVerdict, frontMark = tcxNext, 0x00010000 // let through, and steered as pod A
		}
		checkMarks(t, c, []markCase{
			{step + ": node address", podB, nodeAddr.String(), "tcp", 10250, 0, tcxNext, nodeMark},
			{step + ": cluster destination", podA, "10.244.3.9", "tcp", 80, 0, clusterVerdict, 0},
			{step + ": frontend", podA, web.String(), "tcp", 443, 0, frontVerdict, frontMark},
		})
		rules, err := in.Rules(true)
		if err != nil || len(rules) != 1 || rules[0].Text != qosText {
			t.Errorf("%s: QoS rules %+v (%v), want one with text %q", step, rules, err, qosText)
		}
	}
	check("first", true, false, false, "46 to all")
	check("same lists again", true, false, false, "46 to all")
	check("node no longer exempt", false, false, false, "46 to all")
	check("node exempt again", true, false, false, "46 to all")
	check("frontend added", true, false, true, "46 to all")
	check("cluster network removed", true, true, true, "46 to all")
	check("QoS text changed", true, true, true, "46 to everything")
	check("everything back", true, false, false, "46 to all")
	check("same lists once more", true, false, false, "46 to all")
}
