// Package cniapi is the wire protocol between egressd's chained CNI plugin (cmd/egressd-cni) and
// the agent (nodeagent/cniserver): HTTP/1.1 with JSON bodies over a unix socket on the host.
// It imports the standard library only: the plugin starts at every pod's ADD, and each package
// it links makes that start slower.
//
//	POST /v1/add    Request -> 200 Response once the pod is programmed, else an error status
//	POST /v1/del    Request -> 200 (idempotent: an unknown sandbox is not an error)
//	POST /v1/check  Request -> 200 if egressd holds the pod with these addresses, programmed
//	POST /v1/gc     GCRequest -> 200 (forget every sandbox not listed)
//	GET  /v1/status -> 200 once the agent has finished its first sync
//	POST /v1/router RouterResult -> 200 (the outcome of applying Response.Router)
//
// The ADD of an EgressRouter's router pod is answered with the router's configuration: the
// plugin, root in the pod's sandbox setup, has RouterHelper apply it (dataplane/router) and
// reports the outcome.
//
// An error answer has a non-2xx status and a Response with Error set; Code is a CNI error code
// the plugin returns as is.
package cniapi

import (
	"encoding/json"
	"net/netip"
	"time"
)

// DefaultSocket is where the agent listens by default (egressd --cni-socket).
const DefaultSocket = "/run/egressd/cni.sock"

// Paths of the API.
const (
	PathAdd    = "/v1/add"
	PathDel    = "/v1/del"
	PathCheck  = "/v1/check"
	PathGC     = "/v1/gc"
	PathStatus = "/v1/status"
	PathRouter = "/v1/router"
)

// Request is one CNI call for one pod sandbox.
type Request struct {
	// ContainerID is CNI_CONTAINERID: the sandbox.
	ContainerID string `json:"containerID"`
	// Netns is CNI_NETNS (may be empty on DEL).
	Netns string `json:"netns,omitempty"`
	// IfName is CNI_IFNAME.
	IfName string `json:"ifName,omitempty"`
	// Namespace and Name are the pod's, from CNI_ARGS K8S_POD_NAMESPACE and K8S_POD_NAME.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID is K8S_POD_UID when the runtime passes it.
	UID string `json:"uid,omitempty"`
	// IPs are the pod's addresses from prevResult, with the interface each is on.
	IPs []IP `json:"ips,omitempty"`
	// Interfaces are prevResult's interfaces.
	Interfaces []Interface `json:"interfaces,omitempty"`
	// Timeout is how long the plugin waits; the agent gives up waiting for the pod to be
	// programmed by then.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// IP is one pod address.
type IP struct {
	Address netip.Prefix `json:"address"`
	// Interface is the name of the interface it is on (from prevResult), if known.
	Interface string `json:"interface,omitempty"`
}

// Interface is one interface of prevResult.
type Interface struct {
	Name    string `json:"name"`
	Mac     string `json:"mac,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
}

// GCRequest lists the sandboxes the runtime still has (CNI 1.1 GC, cni.dev/valid-attachments).
type GCRequest struct {
	Valid []string `json:"valid"`
}

// Response answers every call.
type Response struct {
	// Error is set on failure, with a CNI error Code.
	Error string `json:"error,omitempty"`
	Code  uint   `json:"code,omitempty"`
	// Programmed is when the pod's state was applied (ADD, CHECK).
	Programmed time.Time `json:"programmed,omitzero"`
	// Router is set on the ADD of a router pod: its configuration (dataplane/router.Config),
	// which the plugin hands RouterHelper unread.
	Router json.RawMessage `json:"router,omitempty"`
}

// RouterHelper is the executable, beside the plugin, that configures a router pod: run with
// RouterSetup on stdin, it writes a RouterResult with Master and Error on stdout. The router's
// code (netlink, nftables, ARP) lives there, so that the plugin every other pod's ADD starts
// is smaller: linked in, it made each start 1.5 ms slower (of 13 ms).
const RouterHelper = "egressd-cni-router"

// RouterSetup is what the plugin hands RouterHelper: the pod's network namespace and
// cluster-side interface (CNI_NETNS, CNI_IFNAME) and Response.Router.
type RouterSetup struct {
	Netns  string          `json:"netns"`
	IfName string          `json:"ifName"`
	Config json.RawMessage `json:"config"`
}

// RouterResult is the outcome of configuring a router pod.
type RouterResult struct {
	ContainerID string `json:"containerID"`
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	// Master is the node NIC the macvlan was put on.
	Master string `json:"master,omitempty"`
	// Error is why it failed; empty on success.
	Error string `json:"error,omitempty"`
}

// CNI error codes used (https://www.cni.dev/docs/spec/#error).
const (
	CodeInvalidEnv    = 4   // CNI_ARGS lack the pod's namespace or name
	CodeDecode        = 6   // a body could not be decoded
	CodeInvalidConfig = 7   // plugin config or prevResult unusable
	CodeTryAgainLater = 11  // egressd not reachable, or the pod not programmed in time
	CodeNotAvailable  = 50  // STATUS: egressd not reachable or not synced
	CodeCheckMismatch = 100 // CHECK: egressd does not hold the pod as prevResult has it
	CodeProgramFailed = 101 // egressd tried and failed to program the pod (its error follows)
	CodeRouterFailed  = 102 // an EgressRouter's router pod has no configuration: failOpen never passes it
)
