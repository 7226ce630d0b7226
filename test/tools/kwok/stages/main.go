// Command stages prints the kwok Stages the scale harness runs kwok with: the "fast" set of
// kwok's kustomize/stage (nodes Ready at once, pods Running with an address from their node's
// podCIDR at once, deleted pods removed), and a node status refresh every 10 to 20 minutes,
// the pace of a kubelet that renews a Lease between status updates (kwok's
// node-heartbeat-with-lease; the harness runs kwok without Leases, which no egressd process
// watches). Printed from kwok's own module, so they match the pinned kwok.
package main

import (
	"fmt"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	heartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

func main() {
	for _, s := range []string{nodefast.DefaultNodeInit, heartbeat.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady, podfast.DefaultPodComplete, podfast.DefaultPodDelete} {
		fmt.Printf("---\n%s\n", s)
	}
}
