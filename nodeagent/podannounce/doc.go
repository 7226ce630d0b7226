// Package podannounce tells the egress nodes of a new pod about it before the API does.
//
// A pod's agent programs the pod from its CNI ADD and steers its first packet to the egress
// node of its EgressIP at once; the egress node would learn the pod's address from the API only
// after the kubelet has posted it, and drops the steered packets of pods it does not know until
// then (dataplane/nft: egressip_unknown_pods). So, before the pod's agent answers the ADD, it
// announces the pod (namespace, name, its node, the CNI's addresses) to the agents of its egress
// nodes over the gRPC port they already serve for the leader's health checks, and the egress
// node's agent answers once it SNATs the pod.
//
// An announcement is trusted as far as the node that makes it: it must come from an address of
// the node that runs the pod (by the Pod object in the receiver's cache), and its addresses must
// be in that node's pod networks (spec.podCIDRs) when the node has any. It only anticipates
// what the Pod object will say: the receiver's store drops it once the object shows the
// addresses, or after a minute.
package podannounce
