package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EgressRouter is a feature allowing the user to define an egress router that acts as a bridge
// between pods and external systems. The egress router runs a service that redirects egress
// traffic originating from a pod or a group of pods to a remote external system or multiple
// destinations as per configuration.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:path=egressrouters,scope=Namespaced,singular=egressrouter
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Condition",type=string,JSONPath=".status.conditions[*].type"
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=".status.conditions[*].status"
type EgressRouter struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Specification of the desired egress router.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:XValidation:rule="self.mode != 'Redirect' || has(self.redirect)",message="redirect is required when mode is Redirect"
	Spec EgressRouterSpec `json:"spec"`

	// Observed status of EgressRouter.
	Status EgressRouterStatus `json:"status,omitempty"`
}

// EgressRouterSpec contains the configuration for an egress router.
// Mode, networkInterface and addresses fields must be specified along with exactly one "Config"
// that matches the mode.
type EgressRouterSpec struct {
	// Mode depicts the mode that is used for the egress router. The default mode is "Redirect" and
	// is the only supported mode currently.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Enum="Redirect"
	// +kubebuilder:default:="Redirect"
	Mode EgressRouterMode `json:"mode"`

	// Redirect represents the configuration parameters specific to redirect mode.
	Redirect *RedirectConfig `json:"redirect,omitempty"`

	// Specification of interface to create/use. The default is macvlan.
	// Currently only macvlan is supported.
	// +kubebuilder:validation:Required
	// +kubebuilder:default:={macvlan: {mode: Bridge}}
	NetworkInterface EgressRouterInterface `json:"networkInterface"`

	// List of IP addresses to configure on the pod's secondary interface.
	// +kubebuilder:validation:Required
	// +listType=atomic
	Addresses []EgressRouterAddress `json:"addresses"`
}

// EgressRouterMode defines the different types of modes that are supported for the egress router interface.
type EgressRouterMode string

const (
	// EgressRouterModeRedirect creates an egress router that sets up iptables rules to redirect traffic
	// from its own IP address to one or more remote destination IP addresses.
	EgressRouterModeRedirect EgressRouterMode = "Redirect"
)

// RedirectConfig represents the configuration parameters specific to redirect mode.
type RedirectConfig struct {
	// List of L4RedirectRules that define the DNAT redirection from the pod to the destination in redirect mode.
	// +listType=atomic
	RedirectRules []L4RedirectRule `json:"redirectRules,omitempty"`

	// FallbackIP specifies the remote destination's IP address. Can be IPv4 or IPv6.
	// If no redirect rules are specified, all traffic from the router are redirected to this IP.
	// If redirect rules are specified, then any connections on any other port (undefined in the rules) on the router will be redirected to this IP.
	// If redirect rules are specified and no fallback IP is provided, connections on other ports will simply be rejected.
	// +kubebuilder:validation:Format=ip
	// +kubebuilder:validation:MaxLength=45
	FallbackIP string `json:"fallbackIP,omitempty"`
}

// L4RedirectRule defines a DNAT redirection from a given port to a destination IP and port.
type L4RedirectRule struct {
	// IP specifies the remote destination's IP address. Can be IPv4 or IPv6.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Format=ip
	// +kubebuilder:validation:MaxLength=45
	DestinationIP string `json:"destinationIP"`

	// Port is the port number to which clients should send traffic to be redirected.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// Protocol can be TCP, SCTP or UDP.
	// +kubebuilder:validation:Required
	Protocol ProtocolType `json:"protocol"`

	// TargetPort allows specifying the port number on the remote destination to which the traffic gets redirected to.
	// If unspecified, the value from "Port" is used.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	TargetPort int32 `json:"targetPort,omitempty"`
}

// ProtocolType defines the protocol types that are supported.
// +kubebuilder:validation:Enum="TCP";"UDP";"SCTP"
type ProtocolType string

const (
	// ProtocolTypeTCP refers to the TCP protocol.
	ProtocolTypeTCP ProtocolType = "TCP"
	// ProtocolTypeUDP refers to the UDP protocol.
	ProtocolTypeUDP ProtocolType = "UDP"
	// ProtocolTypeSCTP refers to the SCTP protocol.
	ProtocolTypeSCTP ProtocolType = "SCTP"
)

// EgressRouterInterface contains the configuration of interface to create/use.
type EgressRouterInterface struct {
	// Arguments specific to the interfaceType macvlan
	// +kubebuilder:default:={mode: Bridge}
	Macvlan MacvlanConfig `json:"macvlan"`
}

// MacvlanMode defines the different types of modes that are supported for the macvlan interface.
// source: https://man7.org/linux/man-pages/man8/ip-link.8.html
// +kubebuilder:validation:Enum=Bridge;Private;VEPA;Passthru
type MacvlanMode string

const (
	// MacvlanModeBridge connects all endpoints directly to each other, communication is not redirected through the physical interface's peer.
	MacvlanModeBridge MacvlanMode = "Bridge"
	// MacvlanModePrivate does not allow communication between macvlan instances on the same physical interface.
	MacvlanModePrivate MacvlanMode = "Private"
	// MacvlanModeVEPA sends all data out the physical interface.
	MacvlanModeVEPA MacvlanMode = "VEPA"
	// MacvlanModePassthru allows a single VM to be connected directly to the physical interface.
	MacvlanModePassthru MacvlanMode = "Passthru"
)

// MacvlanConfig consists of arguments specific to the macvlan EgressRouterInterfaceType.
type MacvlanConfig struct {
	// Options to be passed to the macvlan interface. The default is Bridge.
	// +kubebuilder:validation:Required
	// +kubebuilder:default:=Bridge
	Mode MacvlanMode `json:"mode"`

	// Name of the master interface. Need not be specified if it can be inferred from the IP address.
	Master string `json:"master,omitempty"`
}

// EgressRouterAddress contains a pair of IP CIDR and gateway to be configured on the router's interface.
type EgressRouterAddress struct {
	// IP is the address to configure on the router's interface. Can be IPv4 or IPv6.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Format=cidr
	IP string `json:"ip"`
	// IP address of the next-hop gateway, if it cannot be automatically determined. Can be IPv4 or IPv6.
	// +kubebuilder:validation:Format=ip
	// +kubebuilder:validation:MaxLength=45
	Gateway string `json:"gateway,omitempty"`
}

// EgressRouterStatusConditionType is an aspect of the router's state.
// +kubebuilder:validation:Enum=Available;Progressing;Degraded
type EgressRouterStatusConditionType string

const (
	// EgressRouterAvailable indicates that the EgressRouter (the associated pod, service, NAD), is functional and available in the cluster.
	EgressRouterAvailable EgressRouterStatusConditionType = "Available"
	// EgressRouterProgressing indicates that the router is actively rolling out a component.
	EgressRouterProgressing EgressRouterStatusConditionType = "Progressing"
	// EgressRouterDegraded indicates that the router's current state does not match its desired state over a period of time.
	EgressRouterDegraded EgressRouterStatusConditionType = "Degraded"
)

// ConditionStatus is the status of a condition.
// +kubebuilder:validation:Enum="True";"False";"Unknown"
type ConditionStatus string

// These are valid condition statuses.
const (
	ConditionTrue    ConditionStatus = "True"
	ConditionFalse   ConditionStatus = "False"
	ConditionUnknown ConditionStatus = "Unknown"
)

// EgressRouterStatusCondition represents the state of the egress router's managed and monitored components.
type EgressRouterStatusCondition struct {
	// Type specifies the aspect reported by this condition; one of Available, Progressing, Degraded
	// +kubebuilder:validation:Required
	Type EgressRouterStatusConditionType `json:"type"`

	// Status of the condition, one of True, False, Unknown.
	// +kubebuilder:validation:Required
	Status ConditionStatus `json:"status"`

	// LastTransitionTime is the time of the last update to the current status property.
	// +kubebuilder:validation:Required
	// +nullable
	LastTransitionTime metav1.Time `json:"lastTransitionTime"`

	// Reason is the CamelCase reason for the condition's current status.
	Reason string `json:"reason,omitempty"`

	// Message provides additional information about the current condition.
	// This is only to be consumed by humans. It may contain Line Feed characters (U+000A), which should be rendered as new lines.
	Message string `json:"message,omitempty"`
}

// EgressRouterStatus contains the observed status of EgressRouter. Read-only.
type EgressRouterStatus struct {
	// Observed status of the egress router
	// +kubebuilder:validation:Required
	// +listType=map
	// +listMapKey=type
	Conditions []EgressRouterStatusCondition `json:"conditions,omitempty"`
}

// EgressRouterList is the list of egress router pods requested.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type EgressRouterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []EgressRouter `json:"items"`
}
