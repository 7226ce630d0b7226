package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EgressQoS is a CRD that allows the user to define a DSCP value for pods egress traffic on its
// namespace to specified CIDRs. Traffic from these pods will be checked against each EgressQoSRule
// in the namespace's EgressQoS, and if there is a match the traffic is marked with the relevant
// DSCP value. Only an object named "default" is accepted.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:path=egressqoses,scope=Namespaced,singular=egressqos
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=".status.status"
type EgressQoS struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EgressQoSSpec   `json:"spec,omitempty"`
	Status EgressQoSStatus `json:"status,omitempty"`
}

// EgressQoSSpec defines the desired state of EgressQoS.
type EgressQoSSpec struct {
	// a collection of Egress QoS rule objects
	// +listType=atomic
	Egress []EgressQoSRule `json:"egress"`
}

// EgressQoSRule marks the traffic of the selected pods to a destination with a DSCP value.
type EgressQoSRule struct {
	// DSCP marking value for matching pods' traffic.
	// +kubebuilder:validation:Maximum:=63
	// +kubebuilder:validation:Minimum:=0
	DSCP int `json:"dscp"`

	// DstCIDR specifies the destination's CIDR. Only traffic heading
	// to this CIDR will be marked with the DSCP value.
	// This field is optional, and in case it is not set the rule is applied
	// to all egress traffic regardless of the destination.
	// +optional
	// +kubebuilder:validation:Format="cidr"
	DstCIDR *string `json:"dstCIDR,omitempty"`

	// PodSelector applies the QoS rule only to the pods in the namespace whose label
	// matches this definition. This field is optional, and in case it is not set
	// results in the rule being applied to all pods in the namespace.
	// +optional
	PodSelector metav1.LabelSelector `json:"podSelector,omitempty"`
}

// EgressQoSStatus defines the observed state of EgressQoS.
type EgressQoSStatus struct {
	// A concise indication of whether the EgressQoS resource is applied with success.
	// +optional
	Status string `json:"status,omitempty"`

	// An array of condition objects indicating details about status of EgressQoS object,
	// one "Ready-In-Zone-<node>" condition per node.
	// +optional
	// +patchMergeKey=type
	// +patchStrategy=merge
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// EgressQoSList contains a list of EgressQoS.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type EgressQoSList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EgressQoS `json:"items"`
}
