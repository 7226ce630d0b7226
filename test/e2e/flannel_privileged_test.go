package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressIPFlannelStrictReversePath: on flannel, a node reaches the other nodes'
// pods through flannel.1, while egressd steers a pod's EgressIP traffic to its egress node
// directly over the nodes' network. With a strict reverse path filter on the egress node (the
// default of RHEL and others: net.ipv4.conf.all.rp_filter=1) the steered packets arrive on
// eth0 with a source main routes through flannel.1, and are dropped, unless the agent loosens
// eth0's filter, which it says in its log and metrics and puts back by egressctl cleanup.
func TestPrivilegedEgressIPFlannelStrictReversePath(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{0: lab.Flannel, 1: lab.Flannel}, Agents: true,
		NodeLabels: map[int]map[string]string{1: {assignable: ""}}})
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10"); err != nil {
		t.Fatal(err)
	}
	n0, n1 := l.Nodes[0], l.Nodes[1]
	if err := n1.NS.Script("sysctl -qw net.ipv4.conf.all.rp_filter=1"); err != nil {
		t.Fatal(err)
	}
	ns := egressNamespace(t, l)
	pod := addPod(t, n0, ns, "steered", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	local := addPod(t, n1, ns, "local", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	createEgressIP(t, l, "eip-"+ns, "eip", eip4)
	waitItems(t, l, "eip-"+ns, n1.Name+"="+eip4)

	v4 := netip.MustParseAddr(eip4)
	eventuallySource(t, "the egress node's own pod", local, "203.0.113.10:80", v4)
	eventuallySource(t, "a pod steered from the other flannel node", pod, "203.0.113.10:80", v4)
	rpFilter := func() string {
		out, _ := n1.NS.Run("cat", "/proc/sys/net/ipv4/conf/eth0/rp_filter")
		return strings.TrimSpace(out)
	}
	if got := rpFilter(); got != "2" {
		t.Errorf("%s's eth0 rp_filter %s, want 2 (loosened)", n1.Name, got)
	}
	if got := sample(t, n1, `egressd_strict_rp_filter_interface{interface="eth0"}`); got != 0 {
		t.Errorf("egressd_strict_rp_filter_interface{eth0} = %v after loosening, want 0", got)
	}

	// Pods elsewhere no longer steered here: the filter is put back.
	if err := l.Kube.Delete(t.Context(), "k8s.ovn.org/v1", "EgressIP", "", "eip-"+ns); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, n1.Name+"'s eth0 rp_filter put back", 20*time.Second, func() error {
		if got := rpFilter(); got != "0" {
			return fmt.Errorf("rp_filter %s, want 0", got)
		}
		return nil
	})
}
