package egressrouter

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
)

func TestPlace(t *testing.T) {
	first := netip.MustParsePrefix("172.18.0.200/24")
	onNet := []netip.Prefix{netip.MustParsePrefix("172.18.0.10/24"), netip.MustParsePrefix("10.0.0.1/8")}
	offNet := []netip.Prefix{netip.MustParsePrefix("10.1.0.1/16")}
	node := func(name string, ready, reachable bool, cidrs []netip.Prefix) Candidate {
		return Candidate{Name: name, Ready: ready, Reachable: reachable, HostCIDRs: cidrs}
	}
	healthy := []Candidate{node("a", true, true, onNet), node("b", true, true, onNet), node("c", true, true, offNet)}
	for _, tc := range []struct {
		name       string
		master     string
		compileErr error
		nodes      []Candidate
		pods       []RouterPod
		load       map[string]int
		want       Placement
		msg        string
	}{
		{name: "new: the eligible node by name", nodes: healthy,
			want: Placement{Create: "a", Reason: ReasonCreated}, msg: "created on node a"},
		{name: "new: the least loaded eligible node", nodes: healthy, load: map[string]int{"a": 2, "b": 1, "c": 0},
			want: Placement{Create: "b", Reason: ReasonCreated}},
		{name: "kept where it is, even when another node is less loaded", nodes: healthy, load: map[string]int{"b": 3},
			pods: []RouterPod{{Name: "r1", Node: "b", SpecHash: "h"}}, want: Placement{Keep: "r1"}},
		{name: "extra pods are deleted", nodes: healthy,
			pods: []RouterPod{{Name: "r1", Node: "b", SpecHash: "h"}, {Name: "r2", Node: "a", SpecHash: "h"}},
			want: Placement{Keep: "r1", Delete: []string{"r2"}}},
		{name: "node NotReady: recreated elsewhere", nodes: []Candidate{node("a", false, true, onNet), node("b", true, true, onNet)},
			pods: []RouterPod{{Name: "r1", Node: "a", SpecHash: "h"}},
			want: Placement{Delete: []string{"r1"}, Create: "b", Reason: ReasonNodeUnavailable}, msg: "node a is not Ready"},
		{name: "node unreachable: recreated elsewhere", nodes: []Candidate{node("a", true, false, onNet), node("b", true, true, onNet)},
			pods: []RouterPod{{Name: "r1", Node: "a", SpecHash: "h"}},
			want: Placement{Delete: []string{"r1"}, Create: "b", Reason: ReasonNodeUnavailable}},
		{name: "spec changed: replaced", nodes: healthy, pods: []RouterPod{{Name: "r1", Node: "a", SpecHash: "old"}},
			want: Placement{Delete: []string{"r1"}, Create: "a", Reason: ReasonSpecChanged}, msg: "spec changed"},
		{name: "no node on the network", nodes: []Candidate{node("c", true, true, offNet)},
			want: Placement{Reason: ReasonNoNode}, msg: "has an address in 172.18.0.0/24"},
		{name: "the only node on the network fails: the pod goes, none replaces it",
			nodes: []Candidate{node("a", true, false, onNet), node("c", true, true, offNet)},
			pods:  []RouterPod{{Name: "r1", Node: "a", SpecHash: "h"}},
			want:  Placement{Delete: []string{"r1"}, Reason: ReasonNoNode}},
		{name: "master set, no node has an address on the network: any healthy node", master: "ens5",
			nodes: []Candidate{node("c", true, true, offNet), node("d", false, true, offNet)},
			want:  Placement{Create: "c", Reason: ReasonCreated}},
		{name: "master set, but the network is known: only its nodes", master: "ens5",
			nodes: []Candidate{node("a", false, true, onNet), node("c", true, true, offNet)},
			want:  Placement{Reason: ReasonNoNode}},
		{name: "invalid spec: no pod", compileErr: errors.New("spec.redirect.redirectRules[0]: bad"), nodes: healthy,
			pods: []RouterPod{{Name: "r1", Node: "a", SpecHash: "h"}},
			want: Placement{Delete: []string{"r1"}, Reason: ReasonInvalidSpec}, msg: "redirectRules[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Place(first, tc.master, "h", tc.compileErr, tc.nodes, tc.pods, tc.load)
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
	status := func(c Conditions) [3]string {
		return [3]string{string(c.Available.Status) + " " + c.Available.Reason, string(c.Progressing.Status) + " " + c.Progressing.Reason,
			string(c.Degraded.Status) + " " + c.Degraded.Reason}
	}
	for _, tc := range []struct {
		name  string
		conds Conditions
		want  [3]string
	}{
		{name: "created", want: [3]string{"False RouterPodPending", "True RouterPodCreated", "False AsExpected"},
			conds: must(ForPlacement(Placement{Create: "a", Reason: ReasonCreated}))},
		{name: "moved", want: [3]string{"False RouterPodPending", "True NodeUnavailable", "False AsExpected"},
			conds: must(ForPlacement(Placement{Create: "b", Delete: []string{"r1"}, Reason: ReasonNodeUnavailable}))},
		{name: "no node", want: [3]string{"False NoNodeForNetwork", "False NoNodeForNetwork", "True NoNodeForNetwork"},
			conds: must(ForPlacement(Placement{Reason: ReasonNoNode}))},
		{name: "configured", want: [3]string{"True RouterConfigured", "False RouterConfigured", "False AsExpected"},
			conds: ForConfiguration("r1", "a", "serves", nil)},
		{name: "configuration failed", want: [3]string{"False ConfigurationFailed", "False ConfigurationFailed", "True ConfigurationFailed"},
			conds: ForConfiguration("r1", "a", "", errors.New(`macvlan master "ens9": Link not found`))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := status(tc.conds); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	if _, ok := ForPlacement(Placement{Keep: "r1"}); ok {
		t.Error("a kept pod gets the leader's conditions: they would overwrite the node's report")
	}

	// Only a status flip moves lastTransitionTime; a new reason is a change to write.
	then := metav1.NewTime(time.Unix(1000, 0))
	now := metav1.NewTime(time.Unix(2000, 0))
	c := ForConfiguration("r1", "a", "serves", nil)
	current := []netopv1.EgressRouterStatusCondition{
		{Type: netopv1.EgressRouterAvailable, Status: netopv1.ConditionTrue, Reason: ReasonConfigured, Message: c.Available.Message, LastTransitionTime: then},
		{Type: netopv1.EgressRouterProgressing, Status: netopv1.ConditionTrue, Reason: ReasonCreated, LastTransitionTime: then},
		{Type: netopv1.EgressRouterDegraded, Status: netopv1.ConditionFalse, Reason: reasonAsExpected, LastTransitionTime: then},
	}
	if !c.merge(current, now) {
		t.Error("Progressing flipped, but nothing to write")
	}
	if c.Available.LastTransitionTime != then || c.Degraded.LastTransitionTime != then || c.Progressing.LastTransitionTime != now {
		t.Errorf("transition times %v %v %v", c.Available.LastTransitionTime, c.Progressing.LastTransitionTime, c.Degraded.LastTransitionTime)
	}
	current[1].Status, current[1].Reason = netopv1.ConditionFalse, ReasonConfigured
	if c.merge(current, now) {
		t.Error("nothing changed, but a write")
	}
}

func must(c Conditions, ok bool) Conditions {
	if !ok {
		panic("no conditions")
	}
	return c
}
