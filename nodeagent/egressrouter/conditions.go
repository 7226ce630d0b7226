package egressrouter

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netopac "github.com/egressd/egressd/api/generated/applyconfiguration/networkoperator/v1"
	"github.com/egressd/egressd/api/generated/clientset/versioned"
	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
)

// Reasons of the configuring node's report, and of the leader's about the pods it placed.
const (
	reasonConfigured   = "RouterConfigured"
	reasonConfigFailed = "ConfigurationFailed"
	reasonPending      = "RouterPodPending"
	reasonUnready      = "RouterPodNotReady"
	reasonAsExpected   = "AsExpected"
)

// conditionSet are the three conditions of an EgressRouter at one moment.
type conditionSet struct {
	Available, Progressing, Degraded netopv1.EgressRouterStatusCondition
}

func cond(t netopv1.EgressRouterStatusConditionType, ok bool, reason, message string) netopv1.EgressRouterStatusCondition {
	s := netopv1.ConditionFalse
	if ok {
		s = netopv1.ConditionTrue
	}
	return netopv1.EgressRouterStatusCondition{Type: t, Status: s, Reason: reason, Message: message}
}

// forDecision are the conditions of the leader's decision (none when it keeps the pod: the
// configuring node reported).
func forDecision(p decision) (conditionSet, bool) {
	switch {
	case p.Create != "":
		return conditionSet{
			Available:   cond(netopv1.EgressRouterAvailable, false, reasonPending, "waiting for node "+p.Create+" to configure the router pod"),
			Progressing: cond(netopv1.EgressRouterProgressing, true, p.Reason, p.Message),
			Degraded:    cond(netopv1.EgressRouterDegraded, false, reasonAsExpected, ""),
		}, true
	case p.Keep == "" && p.Reason != "":
		return conditionSet{
			Available:   cond(netopv1.EgressRouterAvailable, false, p.Reason, "no router pod: "+p.Message),
			Progressing: cond(netopv1.EgressRouterProgressing, false, p.Reason, ""),
			Degraded:    cond(netopv1.EgressRouterDegraded, true, p.Reason, p.Message),
		}, true
	}
	return conditionSet{}, false
}

// forConfiguration are the conditions the configuring node reports: the router pod's
// configuration succeeded (what it serves) or failed (why).
func forConfiguration(pod, node, served string, failure error) conditionSet {
	if failure != nil {
		msg := fmt.Sprintf("router pod %s on node %s: %v", pod, node, failure)
		return conditionSet{
			Available:   cond(netopv1.EgressRouterAvailable, false, reasonConfigFailed, msg),
			Progressing: cond(netopv1.EgressRouterProgressing, false, reasonConfigFailed, "the node retries when the pod's sandbox is recreated"),
			Degraded:    cond(netopv1.EgressRouterDegraded, true, reasonConfigFailed, msg),
		}
	}
	return conditionSet{
		Available:   cond(netopv1.EgressRouterAvailable, true, reasonConfigured, fmt.Sprintf("router pod %s on node %s %s", pod, node, served)),
		Progressing: cond(netopv1.EgressRouterProgressing, false, reasonConfigured, ""),
		Degraded:    cond(netopv1.EgressRouterDegraded, false, reasonAsExpected, ""),
	}
}

// unreadyAfter is how long the leader sees a router pod running and not ready before it reports
// it (and as long again before it replaces it): its readiness probe checks the macvlan, which
// the CNI ADD configures before the pod starts, so only a slow first probe excuses it.
const unreadyAfter = 30 * time.Second

// forUnready are the conditions of a router pod that runs without its router: it was never
// configured (the node's CNI chain lacks egressd-cni, or egressd-cni failed open while the
// agent was away, so nothing asked the agent), or its macvlan went away. The leader replaces
// it once stuck (decide).
func forUnready(pod, node string) conditionSet {
	msg := fmt.Sprintf("router pod %s on node %s runs but its router is not there (its readiness probe fails): is egressd-cni in node %s's CNI chain? The leader moves it to another node after %.0fs more, unless no other node is eligible; deleting it makes a new one", pod, node, node, unreadyAfter.Seconds())
	return conditionSet{
		Available:   cond(netopv1.EgressRouterAvailable, false, reasonUnready, msg),
		Progressing: cond(netopv1.EgressRouterProgressing, false, reasonUnready, ""),
		Degraded:    cond(netopv1.EgressRouterDegraded, true, reasonUnready, msg),
	}
}

// merge keeps each condition's lastTransitionTime unless its status flips, and reports whether
// anything differs from the object's.
func (c *conditionSet) merge(current []netopv1.EgressRouterStatusCondition, now metav1.Time) bool {
	changed := false
	for _, want := range []*netopv1.EgressRouterStatusCondition{&c.Available, &c.Progressing, &c.Degraded} {
		want.LastTransitionTime = now
		found := false
		for _, have := range current {
			if have.Type != want.Type {
				continue
			}
			found = true
			if have.Status == want.Status {
				want.LastTransitionTime = have.LastTransitionTime
			}
			changed = changed || have.Status != want.Status || have.Reason != want.Reason || have.Message != want.Message
		}
		changed = changed || !found
	}
	return changed
}

// write applies the conditions with server-side apply as manager, forcing: the writer of an
// EgressRouter's conditions is whoever made the latest decision on it (the leader placing the
// pod, then the node configuring it), and each writes all three, so they never mix.
func (c conditionSet) write(ctx context.Context, client versioned.Interface, er *netopv1.EgressRouter, manager string) error {
	if !c.merge(er.Status.Conditions, metav1.Now()) {
		return nil
	}
	var acs []*netopac.EgressRouterStatusConditionApplyConfiguration
	for _, x := range []netopv1.EgressRouterStatusCondition{c.Available, c.Progressing, c.Degraded} {
		acs = append(acs, netopac.EgressRouterStatusCondition().WithType(x.Type).WithStatus(x.Status).
			WithReason(x.Reason).WithMessage(x.Message).WithLastTransitionTime(x.LastTransitionTime))
	}
	ac := netopac.EgressRouter(er.Name, er.Namespace).WithStatus(netopac.EgressRouterStatus().WithConditions(acs...))
	if _, err := client.NetworkOperatorV1().EgressRouters(er.Namespace).ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: manager, Force: true}); err != nil {
		return fmt.Errorf("EgressRouter %s/%s status: %w", er.Namespace, er.Name, err)
	}
	return nil
}
