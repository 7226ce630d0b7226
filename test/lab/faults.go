package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Faults tests inject into nodes, and what they read back from external hosts.

// SetFabricLink takes the node's fabric link down (up=false) or brings it back: the bridge's
// port of the node goes down, so the node's eth0 loses carrier but keeps its addresses and
// routes, as when a cable or a switch port dies. Only the fabric is cut: the lab's relay to the
// API server is not (see CutAPI).
func (n *Node) SetFabricLink(up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	_, err := n.lab.Fabric.Run("ip", "link", "set", n.fabricPort, state)
	return err
}

// SetReady writes the node's Ready condition, as kubelet (or the node lifecycle controller)
// would.
func (n *Node) SetReady(ctx context.Context, ready bool) error {
	c := n.lab.Client.CoreV1().Nodes()
	obj, err := c.Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	status, reason := corev1.ConditionFalse, "KubeletNotReady"
	if ready {
		status, reason = corev1.ConditionTrue, "KubeletReady"
	}
	now := metav1.Now()
	found := false
	for i := range obj.Status.Conditions {
		cond := &obj.Status.Conditions[i]
		if cond.Type == corev1.NodeReady {
			cond.Status, cond.Reason, cond.LastHeartbeatTime, cond.LastTransitionTime = status, reason, now, now
			found = true
		}
	}
	if !found {
		obj.Status.Conditions = append(obj.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: status,
			Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now})
	}
	_, err = c.UpdateStatus(ctx, obj, metav1.UpdateOptions{})
	return err
}

// Nft runs an nft script in the node's namespace (tests use it to break things on purpose).
func (n *Node) Nft(script string) error {
	cmd := n.NS.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft on %s: %v: %s", n.Name, err, out)
	}
	return nil
}

// MAC is the hardware address of the node's fabric interface (eth0).
func (n *Node) MAC() (string, error) {
	var mac string
	err := n.NS.Do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err == nil {
			mac = ifi.HardwareAddr.String()
		}
		return err
	})
	return mac, err
}

// Neighbour is an entry of a neighbour (ARP or ND) table.
type Neighbour struct {
	Lladdr string   `json:"lladdr"`
	State  []string `json:"state"`
}

// Neighbour reads the host's neighbour entry for ip on its fabric interface; a zero Neighbour
// when it has none.
func (e *External) Neighbour(ip netip.Addr) (Neighbour, error) {
	out, err := e.NS.Run("ip", "-j", "neigh", "show", "to", ip.String(), "dev", "eth0")
	if err != nil {
		return Neighbour{}, err
	}
	var ns []Neighbour
	if err := json.Unmarshal([]byte(out), &ns); err != nil {
		return Neighbour{}, fmt.Errorf("ip neigh: %q: %w", out, err)
	}
	if len(ns) == 0 {
		return Neighbour{}, nil
	}
	return ns[0], nil
}
