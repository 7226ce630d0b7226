// Package v1 holds network.operator.openshift.io/v1 EgressRouter, wire-compatible with OpenShift.
//
// +k8s:deepcopy-gen=package
// +groupName=network.operator.openshift.io
// +groupGoName=NetworkOperator
// +kubebuilder:object:generate=true
package v1
