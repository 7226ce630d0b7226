package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EgressFirewall describes the current egress firewall for a namespace: an ordered list of rules,
// the first matching rule decides, traffic that matches no rule is allowed. Only an object named
// "default" is accepted (the name pattern is added to the CRD by hack/crdpatch, as upstream does).
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:path=egressfirewalls,scope=Namespaced,singular=egressfirewall
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="EgressFirewall Status",type=string,JSONPath=".status.status"
type EgressFirewall struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Specification of the desired behavior of EgressFirewall.
	// +kubebuilder:validation:Required
	// +required
	Spec EgressFirewallSpec `json:"spec"`
	// Observed status of EgressFirewall
	// +optional
	Status EgressFirewallStatus `json:"status,omitempty"`
}

// EgressFirewallStatus is written per node (messages) and aggregated by the leader (status).
type EgressFirewallStatus struct {
	// +optional
	Status string `json:"status,omitempty"`
	// One "<node>: <message>" entry per node, each owned by that node's field manager.
	// +listType=set
	// +optional
	Messages []string `json:"messages,omitempty"`
}

// EgressFirewallSpec is a desired state description of EgressFirewall.
type EgressFirewallSpec struct {
	// a collection of egress firewall rule objects
	// +listType=atomic
	// +kubebuilder:validation:Required
	Egress []EgressFirewallRule `json:"egress"`
}

// EgressFirewallRule is a single egressfirewall rule object.
type EgressFirewallRule struct {
	// type marks this as an "Allow" or "Deny" rule.
	// Upstream's pattern ^Allow|Deny$ is unanchored and lets "Allowxyz" through (then treated as
	// Deny); egressd accepts exactly the two values that mean something.
	// +kubebuilder:validation:Enum=Allow;Deny
	Type EgressFirewallRuleType `json:"type"`
	// ports specify what ports and protocols the rule applies to
	// +optional
	// +listType=atomic
	Ports []EgressFirewallPort `json:"ports,omitempty"`
	// to is the target that traffic is allowed/denied to
	To EgressFirewallDestination `json:"to"`
}

// EgressFirewallRuleType indicates whether an EgressFirewallRule allows or denies traffic.
type EgressFirewallRuleType string

const (
	// EgressFirewallRuleAllow allows matching traffic.
	EgressFirewallRuleAllow EgressFirewallRuleType = "Allow"
	// EgressFirewallRuleDeny drops matching traffic.
	EgressFirewallRuleDeny EgressFirewallRuleType = "Deny"
)

// EgressFirewallPort specifies the port to allow or deny traffic to.
type EgressFirewallPort struct {
	// protocol (tcp, udp, sctp) that the traffic must match.
	// +kubebuilder:validation:Enum=TCP;UDP;SCTP
	Protocol string `json:"protocol"`
	// port that the traffic must match
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// EgressFirewallDestination is the endpoint that traffic is either allowed or denied to.
// Exactly one of its fields must be set.
// +kubebuilder:validation:MinProperties=1
// +kubebuilder:validation:MaxProperties=1
type EgressFirewallDestination struct {
	// cidrSelector is the CIDR range to allow/deny traffic to. If this is set, dnsName and nodeSelector must be unset.
	// Upstream does not validate it at the API server; egressd requires a CIDR.
	// +kubebuilder:validation:Format=cidr
	CIDRSelector string `json:"cidrSelector,omitempty"`
	// dnsName is the domain name to allow/deny traffic to. If this is set, cidrSelector and nodeSelector must be unset.
	// For a wildcard DNS name, the '*' will match only one label. Additionally, only a single '*' can be
	// used at the beginning of the wildcard DNS name. For example, '*.example.com' will match 'sub1.example.com'
	// but won't match 'sub2.sub1.example.com'.
	// +kubebuilder:validation:Pattern=`^(\*\.)?([A-Za-z0-9-]+\.)*[A-Za-z0-9-]+\.?$`
	DNSName string `json:"dnsName,omitempty"`
	// nodeSelector will allow/deny traffic to the Kubernetes node IP of selected nodes. If this is set,
	// cidrSelector and DNSName must be unset.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
}

// EgressFirewallList is a list of EgressFirewall objects.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type EgressFirewallList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EgressFirewall `json:"items"`
}
