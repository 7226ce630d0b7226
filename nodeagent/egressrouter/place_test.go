package egressrouter

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
		// notMsg is what the message must not say ("" nothing).
		notMsg string
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
		{name: "no node has an address on the network: any healthy node, the macvlan on its default-route interface",
			nodes: []candidate{node("c", true, true, offNet), node("d", false, true, offNet)},
			want:  decision{Create: "c", Reason: reasonCreated},
			msg:   "router pod created on node c; no node has an address in 172.18.0.0/24: the macvlan sits on its default-route interface, as upstream"},
		{name: "no node has an address on the network: the least loaded healthy node", nodes: []candidate{node("c", true, true, offNet), node("d", true, true, offNet)},
			load: map[string]int{"c": 1}, want: decision{Create: "d", Reason: reasonCreated}, msg: "default-route interface"},
		{name: "no node has an address on the network, its node NotReady: recreated elsewhere, and said why there",
			nodes: []candidate{node("c", false, true, offNet), node("d", true, true, offNet)}, pods: []routerPod{{Name: "r1", Node: "c", specHash: "h"}},
			want: decision{Delete: []string{"r1"}, Create: "d", Reason: reasonNodeUnavailable},
			msg:  "router pod recreated on node d; no node has an address in 172.18.0.0/24: the macvlan sits on its default-route interface"},
		{name: "no node has an address on the network, none Ready and answering",
			nodes: []candidate{node("c", false, true, offNet), node("d", true, false, offNet)},
			want:  decision{Reason: reasonNoNode}, msg: "no Ready node whose agent answers", notMsg: "address"},
		{name: "the network is known, its only node NotReady: no router on the others",
			nodes: []candidate{node("a", false, true, onNet), node("c", true, true, offNet)},
			want:  decision{Reason: reasonNoNode}, msg: "no Ready node whose agent answers has an address in 172.18.0.0/24"},
		{name: "the only node on the network fails: the pod goes, none replaces it",
			nodes: []candidate{node("a", true, false, onNet), node("c", true, true, offNet)},
			pods:  []routerPod{{Name: "r1", Node: "a", specHash: "h"}},
			want:  decision{Delete: []string{"r1"}, Reason: reasonNoNode}},
		{name: "master set, no node has an address on the network: any healthy node", master: "ens5",
			nodes: []candidate{node("c", true, true, offNet), node("d", false, true, offNet)},
			want:  decision{Create: "c", Reason: reasonCreated}, msg: "created on node c", notMsg: "default-route"},
		{name: "master set, no node has an address on the network, none Ready and answering", master: "ens5",
			nodes: []candidate{node("c", false, true, offNet)},
			want:  decision{Reason: reasonNoNode}, msg: "no Ready node whose agent answers", notMsg: "address"},
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
			got := decide(first, tc.master, "h", tc.compileErr, tc.nodes, nil, tc.pods, tc.load, tc.avoid)
			msg := got.Message
			got.Message = ""
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if !strings.Contains(msg, tc.msg) {
				t.Errorf("message %q does not say %q", msg, tc.msg)
			}
			if tc.notMsg != "" && strings.Contains(msg, tc.notMsg) {
				t.Errorf("message %q says %q", msg, tc.notMsg)
			}
		})
	}
}

// Placement respects cordons and taints as the scheduler and the taint manager would (the
// router pod is bound by nodeName: no scheduler looks).
func TestPlaceCordonTaints(t *testing.T) {
	first := netip.MustParsePrefix("172.18.0.200/24")
	onNet := []netip.Prefix{netip.MustParsePrefix("172.18.0.10/24")}
	offNet := []netip.Prefix{netip.MustParsePrefix("10.1.0.1/16")}
	cordonTaint := corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
	infra := func(effect corev1.TaintEffect) corev1.Taint {
		return corev1.Taint{Key: "dedicated", Value: "infra", Effect: effect}
	}
	node := func(name string, cordoned bool, taints ...corev1.Taint) candidate {
		if cordoned { // as the node lifecycle controller mirrors it
			taints = append(taints, cordonTaint)
		}
		return candidate{Name: name, Ready: true, Reachable: true, Unschedulable: cordoned, Taints: taints, HostCIDRs: onNet}
	}
	offNetwork := candidate{Name: "c", Ready: true, Reachable: true, HostCIDRs: offNet}
	r1On := func(n string) []routerPod { return []routerPod{{Name: "r1", Node: n, specHash: "h"}} }
	tolerateInfra := func(effect corev1.TaintEffect) []corev1.Toleration {
		return []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "infra", Effect: effect}}
	}
	for _, tc := range []struct {
		name        string
		master      string
		nodes       []candidate
		tolerations []corev1.Toleration
		pods        []routerPod
		load        map[string]int
		avoid       []string
		want        decision
		msg         string
	}{
		{name: "cordoned: no new pod there", nodes: []candidate{node("a", true), node("b", false)}, load: map[string]int{"b": 3},
			want: decision{Create: "b", Reason: reasonCreated}, msg: "created on node b"},
		{name: "cordon alone keeps the router where it is", nodes: []candidate{node("a", true), node("b", false)}, pods: r1On("a"),
			want: decision{Keep: "r1"}},
		{name: "drained: the evicted router comes back on another node, not the cordoned one",
			nodes: []candidate{node("a", true), node("b", false)}, load: map[string]int{"b": 3}, // the pod on a is gone
			want: decision{Create: "b", Reason: reasonCreated}},
		{name: "cordoned: the router pod's own tolerations (every taint) do not let it on",
			nodes: []candidate{node("a", true), node("b", false)}, tolerations: newPod(&netopv1.EgressRouter{}, "", "").Spec.Tolerations,
			want: decision{Create: "b", Reason: reasonCreated}},
		{name: "spec changed on a cordoned node: the new pod goes elsewhere", nodes: []candidate{node("a", true), node("b", false)},
			pods: []routerPod{{Name: "r1", Node: "a", specHash: "old"}},
			want: decision{Delete: []string{"r1"}, Create: "b", Reason: reasonSpecChanged}},
		{name: "NoSchedule not tolerated: no new pod there", nodes: []candidate{node("a", false, infra(corev1.TaintEffectNoSchedule)), node("b", false)},
			want: decision{Create: "b", Reason: reasonCreated}},
		{name: "NoSchedule tolerated: allowed", nodes: []candidate{node("a", false, infra(corev1.TaintEffectNoSchedule)), node("b", false)},
			tolerations: tolerateInfra(corev1.TaintEffectNoSchedule), want: decision{Create: "a", Reason: reasonCreated}},
		{name: "NoSchedule not tolerated: the router there stays", nodes: []candidate{node("a", false, infra(corev1.TaintEffectNoSchedule)), node("b", false)},
			pods: r1On("a"), want: decision{Keep: "r1"}},
		{name: "NoExecute not tolerated: the router moves", nodes: []candidate{node("a", false, infra(corev1.TaintEffectNoExecute)), node("b", false)},
			pods: r1On("a"), want: decision{Delete: []string{"r1"}, Create: "b", Reason: reasonNodeUnavailable},
			msg: "node a (taint dedicated=infra:NoExecute not tolerated) evicts the router pod: router pod recreated on node b"},
		{name: "NoExecute tolerated: the router stays", nodes: []candidate{node("a", false, infra(corev1.TaintEffectNoExecute)), node("b", false)},
			tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}, pods: r1On("a"), want: decision{Keep: "r1"}},
		{name: "NoExecute tolerated only for NoSchedule: the router moves",
			nodes:       []candidate{node("a", false, infra(corev1.TaintEffectNoExecute)), node("b", false)},
			tolerations: tolerateInfra(corev1.TaintEffectNoSchedule), pods: r1On("a"),
			want: decision{Delete: []string{"r1"}, Create: "b", Reason: reasonNodeUnavailable}},
		{name: "NoExecute on the only node: the router goes, none replaces it",
			nodes: []candidate{node("a", false, infra(corev1.TaintEffectNoExecute)), offNetwork}, pods: r1On("a"),
			want: decision{Delete: []string{"r1"}, Reason: reasonNoSchedulableNode}, msg: "a: taint dedicated=infra:NoExecute not tolerated"},
		{name: "PreferNoSchedule: another node preferred, even more loaded",
			nodes: []candidate{node("a", false, infra(corev1.TaintEffectPreferNoSchedule)), node("b", false)}, load: map[string]int{"b": 3},
			want: decision{Create: "b", Reason: reasonCreated}},
		{name: "PreferNoSchedule tolerated: by load and name as usual",
			nodes: []candidate{node("a", false, infra(corev1.TaintEffectPreferNoSchedule)), node("b", false)}, load: map[string]int{"b": 3},
			tolerations: tolerateInfra(corev1.TaintEffectPreferNoSchedule), want: decision{Create: "a", Reason: reasonCreated}},
		{name: "PreferNoSchedule on the only node: used", nodes: []candidate{node("a", false, infra(corev1.TaintEffectPreferNoSchedule)), offNetwork},
			want: decision{Create: "a", Reason: reasonCreated}},
		{name: "PreferNoSchedule: the router there stays",
			nodes: []candidate{node("a", false, infra(corev1.TaintEffectPreferNoSchedule)), node("b", false)}, pods: r1On("a"),
			want: decision{Keep: "r1"}},
		{name: "every node cordoned or tainted: no router, each node and why",
			nodes: []candidate{node("a", true, infra(corev1.TaintEffectNoSchedule)), node("b", false, infra(corev1.TaintEffectNoExecute)), offNetwork},
			want:  decision{Reason: reasonNoSchedulableNode},
			msg:   "no Ready node whose agent answers and has an address in 172.18.0.0/24 takes a new router pod: a: cordoned, taint dedicated=infra:NoSchedule not tolerated; b: taint dedicated=infra:NoExecute not tolerated"},
		{name: "master set, no node on the network, all cordoned", master: "ens5",
			nodes: []candidate{{Name: "c", Ready: true, Reachable: true, Unschedulable: true, HostCIDRs: offNet}},
			want:  decision{Reason: reasonNoSchedulableNode}, msg: "no Ready node whose agent answers takes a new router pod: c: cordoned"},
		{name: "no node on the network, all cordoned",
			nodes: []candidate{{Name: "c", Ready: true, Reachable: true, Unschedulable: true, HostCIDRs: offNet}},
			want:  decision{Reason: reasonNoSchedulableNode}, msg: "no Ready node whose agent answers takes a new router pod: c: cordoned"},
		{name: "no node on the network: tainted nodes last, as on a known network",
			nodes: []candidate{
				{Name: "c", Ready: true, Reachable: true, HostCIDRs: offNet, Taints: []corev1.Taint{infra(corev1.TaintEffectPreferNoSchedule)}},
				{Name: "d", Ready: true, Reachable: true, HostCIDRs: offNet, Taints: []corev1.Taint{infra(corev1.TaintEffectNoSchedule)}},
				{Name: "e", Ready: true, Reachable: true, HostCIDRs: offNet}},
			load: map[string]int{"e": 2}, want: decision{Create: "e", Reason: reasonCreated}, msg: "router pod created on node e; no node has an address in 172.18.0.0/24"},
		{name: "configuration failed on its node, the other cordoned: the router stays",
			nodes: []candidate{node("a", false), node("b", true)}, pods: r1On("a"), avoid: []string{"a"},
			want: decision{Keep: "r1"}},
		{name: "NotReady and tainted: said as before", nodes: []candidate{
			{Name: "a", Reachable: true, HostCIDRs: onNet, Taints: []corev1.Taint{infra(corev1.TaintEffectNoExecute)}}, node("b", false)},
			pods: r1On("a"), want: decision{Delete: []string{"r1"}, Create: "b", Reason: reasonNodeUnavailable}, msg: "node a is not Ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decide(first, tc.master, "h", nil, tc.nodes, tc.tolerations, tc.pods, tc.load, tc.avoid)
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
		{name: "no schedulable node", want: [3]string{"False NoSchedulableNode", "False NoSchedulableNode", "True NoSchedulableNode"},
			conds: must(forDecision(decision{Reason: reasonNoSchedulableNode, Message: "node-2: cordoned"}))},
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
