package egressip

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Event is a Kubernetes Event the leader records on the EgressIP object Name (kind EgressIP,
// cluster-scoped). Reasons and messages are upstream's, verbatim, since users and tests grep
// for them.
type Event struct {
	EgressIP string
	Type     string // corev1.EventTypeWarning or corev1.EventTypeNormal
	Reason   string
	Message  string
}

// Upstream's event reasons (go-controller/pkg/clustermanager/egressip_controller.go and, for
// UndefinedRequest, go-controller/pkg/ovn/egressip.go). They double as the reasons of
// Unassigned entries.
const (
	ReasonInvalidEgressIP     = "InvalidEgressIP"
	ReasonEgressIPConflict    = "EgressIPConflict"
	ReasonUnsupportedRequest  = "UnsupportedRequest"
	ReasonNoMatchingNodeFound = "NoMatchingNodeFound"
	ReasonUnassignedRequest   = "UnassignedRequest"
	ReasonUndefinedRequest    = "UndefinedRequest"
)

func warning(name, reason, format string, args ...any) Event {
	return Event{EgressIP: name, Type: corev1.EventTypeWarning, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func invalidIPEvent(name, ip string) Event {
	return warning(name, ReasonInvalidEgressIP, "egress IP: %s for object EgressIP: %s is not a valid IP address", ip, name)
}

func conflictEvent(name, ip, node string) Event {
	return warning(name, ReasonEgressIPConflict, "Egress IP %s with IP %v is conflicting with a host (%s) IP address and will not be assigned", name, ip, node)
}

func claimedEvent(name, ip, other, node string) Event {
	return warning(name, ReasonUnsupportedRequest, "IP: %q for EgressIP: %s is already allocated for EgressIP: %s on %s", ip, name, other, node)
}

func noAssignableNodeEvent(name string) Event {
	return warning(name, ReasonNoMatchingNodeFound, "no assignable nodes for EgressIP: %s, please tag at least one node with label: %s", name, AssignableLabel)
}

func noHostingNodeEvent(name string, ips []string) Event {
	return warning(name, ReasonNoMatchingNodeFound, "No matching nodes found, which can host any of the egress IPs: %v for object EgressIP: %s", ips, name)
}

func partlyAssignedEvent(name string) Event {
	return warning(name, ReasonUnassignedRequest, "Not all egress IPs for EgressIP: %s could be assigned, please tag more nodes", name)
}

// standbyEvent names the pod as upstream does, "<namespace>_<name>".
func standbyEvent(name, namespace, pod, serving string) Event {
	return warning(name, ReasonUndefinedRequest, "EgressIP object %s will not be configured for pod %s since another egressIP object %s is serving it, this is undefined", name, namespace+"_"+pod, serving)
}
