package status

import (
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// Unread trims an agent's cache of the objects whose status the controller writes from the
// nodes' reports (EgressFirewall, EgressQoS, AdminPolicyBasedExternalRoute): an agent reads
// none of it, and without it a status write leaves the cached object as it was.
func Unread(obj any) {
	switch o := obj.(type) {
	case *ovnv1.EgressFirewall:
		o.Status = ovnv1.EgressFirewallStatus{}
	case *ovnv1.EgressQoS:
		o.Status = ovnv1.EgressQoSStatus{}
	case *ovnv1.AdminPolicyBasedExternalRoute:
		o.Status = ovnv1.AdminPolicyBasedRouteStatus{}
	}
}
