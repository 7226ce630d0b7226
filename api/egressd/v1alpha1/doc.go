// Package v1alpha1 holds egressd's own API, egressd.io/v1alpha1: the NodeReport each agent
// writes about what its node has programmed, from which the controller writes the status of
// the upstream APIs.
//
// +k8s:deepcopy-gen=package
// +groupName=egressd.io
// +groupGoName=Egressd
// +kubebuilder:object:generate=true
package v1alpha1
