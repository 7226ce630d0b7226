package egressrouter

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
)

func TestPlace(t *testing.T) {
	first := netip.MustParsePrefix("172.18.0.200/24")
	onNet := []netip.Prefix{netip.MustParsePrefix("172.18.0.10/24"), netip.MustParsePrefix("10.0.0.1/8")}
	offNet := []netip.Prefix{netip.MustParsePrefix("10.1.0.1/16")}
	node := func(name string, ready, reachable bool, cidrs []netip.Prefix) candidate {
		return candidate{Name: name, Ready: ready, Reachable: reachable, HostCIDRs: cidrs}
	}
	healthy := []candidate{node("a", true, true, onNet), node("b", true, true, onNet), node("c", true, true, offNet)}
	for _, tc := range []struct {
		name       string
		master     string
		compileErr error
		nodes      []candidate
		pods       []routerPod
		load       map[string]int
		avoid      []string
		want       decision
		msg        string
	}{
		{name: "new: the eligible node by name", nodes: healthy,
			want: decision{Create: "a", Reason: reasonCreated}, msg: "created on node a"},
		{name: "new: the least loaded eligible node", nodes: healthy, load: map[string]int{"a": 2, "b": 1, "c": 0},
			want: decision{Create: "b", Reason: reasonCreated}},
		{name: "kept where it is, even when another node is less loaded", nodes: healthy, load: map[string]int{"b": 3},
			pods: []routerPod{{Name: "r1", Node: "b", specHash: "h"}}, want: decision{Keep: "r1"}},
		{name: "extra pods are deleted", nodes: healthy,
			pods: []routerPod{{Name: "r1", Node: "b", specHash: "h"}, {Name: "r2", Node: "a", specHash: "h"}},
			want: decision{Keep: "r1", Delete: []string{"r2"}}},
		{name: "node NotReady: recreated elsewhere", nodes: []candidate{node("a", false, true, onNet), node("b", true, true, onNet)},
			pods: []routerPod{{Name: "r1", Node: "a", specHash: "h"}},
			want: decision{Delete: []string{"r1"}, Create: "b", Reason: reasonNodeUnavailable}, msg: "node a is not Ready"},
		{name: "node unreachable: recreated elsewhere", nodes: []candidate{node("a", true, false, onNet), node("b", true, true, onNet)},
			pods: []routerPod{{Name: "r1", Node: "a", specHash: "h"}},
			want: decision{Delete: []string{"r1"}, Create: "b", Reason: reasonNodeUnavailable}},
		{name: "spec changed: replaced", nodes: healthy, pods: []routerPod{{Name: "r1", Node: "a", specHash: "old"}},
			want: decision{Delete: []string{"r1"}, Create: "a", Reason: reasonSpecChanged}, msg: "spec changed"},
		{name: "no node on the network", nodes: []candidate{node("c", true, true, offNet)},
			want: decision{Reason: reasonNoNode}, msg: "has an address in 172.18.0.0/24"},
		{name: "the only node on the network fails: the pod goes, none replaces it",
			nodes: []candidate{node("a", true, false, onNet), node("c", true, true, offNet)},
			pods:  []routerPod{{Name: "r1", Node: "a", specHash: "h"}},
			want:  decision{Delete: []string{"r1"}, Reason: reasonNoNode}},
		{name: "master set, no node has an address on the network: any healthy node", master: "ens5",
			nodes: []candidate{node("c", true, true, offNet), node("d", false, true, offNet)},
			want:  decision{Create: "c", Reason: reasonCreated}},
		{name: "master set, but the network is known: only its nodes", master: "ens5",
			nodes: []candidate{node("a", false, true, onNet), node("c", true, true, offNet)},
			want:  decision{Reason: reasonNoNode}},
		{name: "configuration failed on its node: recreated on another", master: "ens5",
			nodes: []candidate{node("c", true, true, offNet), node("d", true, true, offNet)},
			pods:  []routerPod{{Name: "r1", Node: "c", specHash: "h"}}, avoid: []string{"c"},
			want: decision{Delete: []string{"r1"}, Create: "d", Reason: reasonConfigFailed}, msg: "could not be configured on node c: router pod recreated on node d"},
		{name: "configuration failed on every node: the pod stays, its node keeps trying", master: "ens5",
			nodes: []candidate{node("c", true, true, offNet), node("d", true, true, offNet)},
			pods:  []routerPod{{Name: "r1", Node: "c", specHash: "h"}}, avoid: []string{"c", "d"},
			want: decision{Keep: "r1"}},
		{name: "a new pod avoids the nodes where configuration failed", master: "ens5",
			nodes: []candidate{node("c", true, true, offNet), node("d", true, true, offNet)}, avoid: []string{"c"},
			want: decision{Create: "d", Reason: reasonCreated}},
		{name: "stuck on its node (unready): recreated on another", nodes: healthy,
			pods: []routerPod{{Name: "r1", Node: "a", specHash: "h", unready: true, stuck: true}}, avoid: []string{"a"},
			want: decision{Delete: []string{"r1"}, Create: "b", Reason: reasonUnready}, msg: "router pod r1 on node a was not ready for 60s (its router is not there): router pod recreated on node b"},
		{name: "unready, not yet stuck: kept", nodes: healthy,
			pods: []routerPod{{Name: "r1", Node: "a", specHash: "h", unready: true}}, want: decision{Keep: "r1"}},
		{name: "stuck, and no other node: kept, its node keeps trying", nodes: healthy[:1],
			pods: []routerPod{{Name: "r1", Node: "a", specHash: "h", unready: true, stuck: true}}, avoid: []string{"a"},
			want: decision{Keep: "r1"}},
		{name: "invalid spec: no pod", compileErr: errors.New("spec.redirect.redirectRules[0]: bad"), nodes: healthy,
			pods: []routerPod{{Name: "r1", Node: "a", specHash: "h"}},
			want: decision{Delete: []string{"r1"}, Reason: reasonInvalidSpec}, msg: "redirectRules[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decide(first, tc.master, "h", tc.compileErr, tc.nodes, tc.pods, tc.load, tc.avoid)
			msg := got.Message
			got.Message = ""
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if !strings.Contains(msg, tc.msg) {
				t.Errorf("message %q does not say %q", msg, tc.msg)
			}
		})
	}
}

func TestConditions(t *testing.T) {
	status := func(c conditionSet) [3]string {
		return [3]string{string(c.Available.Status) + " " + c.Available.Reason, string(c.Progressing.Status) + " " + c.Progressing.Reason,
			string(c.Degraded.Status) + " " + c.Degraded.Reason}
	}
	for _, tc := range []struct {
		name  string
		conds conditionSet
		want  [3]string
	}{
		{name: "created", want: [3]string{"False RouterPodPending", "True RouterPodCreated", "False AsExpected"},
			conds: must(forDecision(decision{Create: "a", Reason: reasonCreated}))},
		{name: "moved", want: [3]string{"False RouterPodPending", "True NodeUnavailable", "False AsExpected"},
			conds: must(forDecision(decision{Create: "b", Delete: []string{"r1"}, Reason: reasonNodeUnavailable}))},
		{name: "no node", want: [3]string{"False NoNodeForNetwork", "False NoNodeForNetwork", "True NoNodeForNetwork"},
			conds: must(forDecision(decision{Reason: reasonNoNode}))},
		{name: "configured", want: [3]string{"True RouterConfigured", "False RouterConfigured", "False AsExpected"},
			conds: forConfiguration("r1", "a", "serves", nil)},
		{name: "configuration failed", want: [3]string{"False ConfigurationFailed", "False ConfigurationFailed", "True ConfigurationFailed"},
			conds: forConfiguration("r1", "a", "", errors.New(`macvlan master "ens9": Link not found`))},
		{name: "running without its router", want: [3]string{"False RouterPodNotReady", "False RouterPodNotReady", "True RouterPodNotReady"},
			conds: forUnready("r1", "a")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := status(tc.conds); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	if _, ok := forDecision(decision{Keep: "r1"}); ok {
		t.Error("a kept pod gets the leader's conditions: they would overwrite the node's report")
	}

	// Only a status flip moves lastTransitionTime; a new reason is a change to write.
	then := metav1.NewTime(time.Unix(1000, 0))
	now := metav1.NewTime(time.Unix(2000, 0))
	c := forConfiguration("r1", "a", "serves", nil)
	current := []netopv1.EgressRouterStatusCondition{
		{Type: netopv1.EgressRouterAvailable, Status: netopv1.ConditionTrue, Reason: reasonConfigured, Message: c.Available.Message, LastTransitionTime: then},
		{Type: netopv1.EgressRouterProgressing, Status: netopv1.ConditionTrue, Reason: reasonCreated, LastTransitionTime: then},
		{Type: netopv1.EgressRouterDegraded, Status: netopv1.ConditionFalse, Reason: reasonAsExpected, LastTransitionTime: then},
	}
	if !c.merge(current, now) {
		t.Error("Progressing flipped, but nothing to write")
	}
	if c.Available.LastTransitionTime != then || c.Degraded.LastTransitionTime != then || c.Progressing.LastTransitionTime != now {
		t.Errorf("transition times %v %v %v", c.Available.LastTransitionTime, c.Progressing.LastTransitionTime, c.Degraded.LastTransitionTime)
	}
	current[1].Status, current[1].Reason = netopv1.ConditionFalse, reasonConfigured
	if c.merge(current, now) {
		t.Error("nothing changed, but a write")
	}
}

func must(c conditionSet, ok bool) conditionSet {
	if !ok {
		panic("no conditions")
	}
	return c
}

// The leader reads from the status which router pod's configuration failed on which node (the
// node's report, forConfiguration), and sees which pod is stuck, and passes over that node
// while the spec stays.
func TestAvoiding(t *testing.T) {
	er := &netopv1.EgressRouter{ObjectMeta: metav1.ObjectMeta{UID: "u1"}, Spec: netopv1.EgressRouterSpec{Mode: netopv1.EgressRouterModeRedirect}}
	report := func(pod, node string, failure error) {
		c := forConfiguration(pod, node, "serving", failure)
		er.Status.Conditions = []netopv1.EgressRouterStatusCondition{c.Available, c.Progressing, c.Degraded}
	}
	hash := specHash(&er.Spec)
	c := &Controller{avoid: map[types.UID]*avoided{}}
	report("r1-x", "c", errors.New("macvlan master ens5 not found"))
	if got := c.avoiding(er, []routerPod{{Name: "r1-x", Node: "c", specHash: hash}}); !slices.Equal(got, []string{"c"}) {
		t.Errorf("after the node's report of a failure: avoiding %v, want [c]", got)
	}
	report("r1-y", "d", nil)
	if got := c.avoiding(er, []routerPod{{Name: "r1-y", Node: "d", specHash: hash}}); !slices.Equal(got, []string{"c"}) {
		t.Errorf("configured elsewhere: avoiding %v, want [c] still", got)
	}
	report("r1-z", "e", errors.New("no"))
	if got := c.avoiding(er, []routerPod{{Name: "r1-z", Node: "d", specHash: hash}}); !slices.Equal(got, []string{"c"}) {
		t.Errorf("a report naming another node than the pod's: avoiding %v, want [c]", got)
	}
	if got := c.avoiding(er, []routerPod{{Name: "r1-y", Node: "d", specHash: hash, unready: true, stuck: true}}); !slices.Equal(got, []string{"c", "d"}) {
		t.Errorf("its pod stuck on d: avoiding %v, want [c d]", got)
	}
	er.Spec.Redirect = &netopv1.RedirectConfig{FallbackIP: "192.0.2.1"}
	if got := c.avoiding(er, nil); len(got) != 0 {
		t.Errorf("a new spec: avoiding %v, want none", got)
	}
}
