package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CloudPrivateIPConfig performs an assignment of a private IP address to the primary NIC
// associated with cloud VMs. This is done by specifying the IP and Kubernetes node which the IP
// should be assigned to. The object's name is the IP: IPv4 as is, IPv6 fully expanded with its
// eight hex groups joined by "." (the ":" is not allowed in names); hack/crdpatch adds that rule.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:path=cloudprivateipconfigs,scope=Cluster,singular=cloudprivateipconfig
// +kubebuilder:subresource:status
type CloudPrivateIPConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the definition of the desired private IP request.
	// +kubebuilder:validation:Required
	// +required
	Spec CloudPrivateIPConfigSpec `json:"spec"`
	// status is the observed status of the desired private IP request. Read-only.
	// +kubebuilder:validation:Optional
	// +optional
	Status CloudPrivateIPConfigStatus `json:"status"`
}

// CloudPrivateIPConfigSpec consists of a node name which the private IP should be assigned to.
type CloudPrivateIPConfigSpec struct {
	// node is the node name, as specified by the Kubernetes field: node.metadata.name
	// +kubebuilder:validation:Optional
	// +optional
	Node string `json:"node"`
}

// CloudPrivateIPConfigStatus specifies the node assignment together with its assignment condition.
type CloudPrivateIPConfigStatus struct {
	// node is the node name, as specified by the Kubernetes field: node.metadata.name
	// +kubebuilder:validation:Optional
	// +optional
	Node string `json:"node"`
	// condition is the assignment condition of the private IP and its status
	// +kubebuilder:validation:Required
	// +required
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions"`
}

// CloudPrivateIPConfigConditionType specifies the current condition type of the CloudPrivateIPConfig.
type CloudPrivateIPConfigConditionType string

const (
	// Assigned signifies the status of the assignment: True = assigned, False = failed, Unknown = pending.
	Assigned CloudPrivateIPConfigConditionType = "Assigned"
)

// CloudPrivateIPConfigList is the list of CloudPrivateIPConfigList.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type CloudPrivateIPConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// List of CloudPrivateIPConfig.
	Items []CloudPrivateIPConfig `json:"items"`
}
