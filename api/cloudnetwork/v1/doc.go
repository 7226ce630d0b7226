// Package v1 holds cloud.network.openshift.io/v1 CloudPrivateIPConfig, wire-compatible with OpenShift.
//
// +k8s:deepcopy-gen=package
// +groupName=cloud.network.openshift.io
// +groupGoName=CloudNetwork
// +kubebuilder:object:generate=true
package v1
