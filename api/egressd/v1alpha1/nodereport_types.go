package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeReport is what one node's egressd agent has programmed: named after the node, written by
// that node's agent alone, owned by the Node (deleted with it). The controller writes the
// status of every EgressFirewall, EgressQoS and AdminPolicyBasedExternalRoute from the reports
// of all nodes: one write per object, where upstream's zones write one entry per object and
// node (at thousands of nodes, quadratic work for the API server and objects past etcd's limit).
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:path=nodereports,scope=Cluster
// +kubebuilder:printcolumn:name="EgressFirewalls",type=string,JSONPath=".programmed.egressFirewalls"
// +kubebuilder:printcolumn:name="EgressQoSes",type=string,JSONPath=".programmed.egressQoSes"
// +kubebuilder:printcolumn:name="ExternalRoutes",type=string,JSONPath=".programmed.adminPolicyBasedExternalRoutes"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type NodeReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Programmed says, per kind, up to which resourceVersion every change of that kind's
	// objects is in the node's dataplane, or failed there (Objects).
	// +optional
	Programmed Programmed `json:"programmed,omitempty"`

	// Objects are the objects whose outcome on the node is more than "applied": a failure, a
	// note, or the gateways an AdminPolicyBasedExternalRoute configures. Sorted by kind,
	// namespace and name.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	Objects []ObjectOutcome `json:"objects,omitempty"`
}

// Programmed holds a resourceVersion per kind (comparable: KEP-5504); empty is "nothing known",
// as when the node's outcomes of that kind were too many to report.
type Programmed struct {
	// +optional
	// +kubebuilder:validation:MaxLength=64
	EgressFirewalls string `json:"egressFirewalls,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	EgressQoSes string `json:"egressQoSes,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	AdminPolicyBasedExternalRoutes string `json:"adminPolicyBasedExternalRoutes,omitempty"`
}

// ObjectOutcome is one object's outcome on the node.
type ObjectOutcome struct {
	// +kubebuilder:validation:Enum=EgressFirewall;EgressQoS;AdminPolicyBasedExternalRoute
	Kind string `json:"kind"`
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Namespace string `json:"namespace,omitempty"`
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Failure is why the node could not apply the object; empty when it did.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Failure string `json:"failure,omitempty"`
	// Note qualifies a success (as upstream appends to its message after "; ").
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Note string `json:"note,omitempty"`
	// Gateways are the external gateways an AdminPolicyBasedExternalRoute configures.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Gateways []string `json:"gateways,omitempty"`
}

// NodeReportList is a list of NodeReports.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NodeReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeReport `json:"items"`
}
