// Package v1 holds the k8s.ovn.org/v1 APIs egressd serves, wire-compatible with OVN-Kubernetes:
// EgressFirewall, EgressQoS, EgressIP, AdminPolicyBasedExternalRoute and EgressService.
//
// +k8s:deepcopy-gen=package
// +groupName=k8s.ovn.org
// +groupGoName=K8sOVN
// +kubebuilder:object:generate=true
package v1
