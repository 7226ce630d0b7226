package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/dataplane/tc"
	"github.com/egressd/egressd/test/agent"
	"github.com/egressd/egressd/test/netns"
)

// Node is a lab node: a namespace with eth0 on the fabric, a pod CIDR per family, host-gw
// routes to the other nodes' pod CIDRs, forwarding on and a CNI-style masquerade rule.
type Node struct {
	Index int
	Name  string
	NS    *netns.NS
	CNI   CNI
	IPv4  netip.Addr
	IPv6  netip.Addr
	PodV4 netip.Prefix
	PodV6 netip.Prefix
	Agent *agent.Process
	// Controller is the replica of egressd controller in the node's namespace, if any.
	Controller *agent.Process
	lab        *Lab
	podSeq     int
	// agentStarted: egressd was started on the node, so its plugin is in the node's CNI chain
	// (the DaemonSet installs it), whether the agent still runs or not.
	agentStarted atomic.Bool
	// fabricPort is the node's port on the fabric bridge (the other end of its eth0).
	fabricPort string
	// api is the node's API forwarder (see CutAPI); apiForwarded: it listens at apiForwardAddr.
	api          *apiForwarder
	apiForwarded bool
	// Kubelet: a real kubelet runs the node (Options.Kubelets) and registered its Node.
	Kubelet bool
}

func (l *Lab) addNode(ctx context.Context, i int) (*Node, error) {
	n := &Node{
		Index: i, Name: fmt.Sprintf("%snode-%d", l.opts.NodePrefix, i), CNI: Routed, lab: l,
		IPv4:  netip.MustParseAddr(fmt.Sprintf(fabricV4, 10+i)),
		IPv6:  netip.MustParseAddr(fmt.Sprintf(fabricV6, 0x10+i)),
		PodV4: netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", i)),
		PodV6: netip.MustParsePrefix(fmt.Sprintf("fd00:10:244:%x::/64", i)),
	}
	if c, ok := l.opts.CNI[i]; ok {
		n.CNI = c
	}
	n.Kubelet = slices.Contains(l.opts.Kubelets, i)
	var err error
	if n.NS, err = l.newNS(fmt.Sprintf("n%d", i)); err != nil {
		return nil, err
	}
	if n.fabricPort, err = l.attach(n.NS, n.Name); err != nil {
		return nil, err
	}
	script := []string{
		"ip addr add " + n.IPv4.String() + "/24 dev eth0",
		"ip addr add " + n.IPv6.String() + "/64 dev eth0 nodad",
		"sysctl -qw net.ipv4.ip_forward=1",
		"sysctl -qw net.ipv6.conf.all.forwarding=1",
		"sysctl -qw net.ipv4.conf.all.rp_filter=0",
		"sysctl -qw net.ipv4.conf.default.rp_filter=0",
	}
	if n.CNI == Bridged {
		gw := gateway(n.PodV4).As4()
		script = append(script,
			// A fixed address (0a:58 and the gateway's IPv4 address, as OVN's): else the kernel
			// gives the bridge its lowest port's, and changes it as ports come and go, leaving
			// the pods' neighbour entries for their gateway on an address no port has until
			// they expire (~30 s of lost traffic: the demo's cloud check flaked on it).
			fmt.Sprintf("ip link add cni0 address 0a:58:%02x:%02x:%02x:%02x type bridge", gw[0], gw[1], gw[2], gw[3]),
			"ip addr add "+gateway(n.PodV4).String()+"/24 dev cni0",
			"ip addr add "+gateway(n.PodV6).String()+"/64 dev cni0 nodad",
			"ip link set cni0 up")
	}
	if err := n.NS.Script(script...); err != nil {
		return nil, err
	}
	if n.CNI.overlay() { // flanneld or cilium-agent creates its devices and masquerade
		return n, n.registerAndConfigure(ctx)
	}
	// The masquerade kindnet and flannel install for pod traffic leaving the cluster.
	masq := fmt.Sprintf(`table inet labcni {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr %s ip daddr != %s masquerade
		ip6 saddr %s ip6 daddr != %s masquerade
	}
}`, ClusterCIDRs[0], ClusterCIDRs[0], ClusterCIDRs[1], ClusterCIDRs[1])
	cmd := n.NS.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(masq)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("masquerade on %s: %v: %s", n.Name, err, out)
	}
	return n, n.registerAndConfigure(ctx)
}

// registerAndConfigure creates the Node object and, with Options.InstallCNI, the node's CNI
// configuration, unless a kubelet runs the node (it registers the Node itself).
func (n *Node) registerAndConfigure(ctx context.Context) error {
	if n.Kubelet {
		return nil
	}
	if n.lab.opts.InstallCNI && !n.CNI.overlay() { // an overlay's is written once its agent runs
		if err := n.WritePrimaryCNI(); err != nil {
			return err
		}
	}
	return n.register(ctx)
}

// gateway is the first address of a pod CIDR (the bridge's address on bridged nodes).
func gateway(p netip.Prefix) netip.Addr { return p.Addr().Next() }

func (n *Node) routeToPeers(nodes []*Node) error {
	var script []string
	for _, o := range nodes {
		if o != n {
			script = append(script,
				fmt.Sprintf("ip route add %s via %s", o.PodV4, o.IPv4),
				fmt.Sprintf("ip -6 route add %s via %s", o.PodV6, o.IPv6))
		}
	}
	return n.NS.Script(script...)
}

// register creates the Node object: addresses, pod CIDRs, labels, Ready.
func (n *Node) register(ctx context.Context) error {
	labels := map[string]string{"kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux"}
	for k, v := range n.lab.opts.NodeLabels[n.Index] {
		labels[k] = v
	}
	obj := &corev1.Node{
		// The annotation every kubelet registers with (flanneld assumes a Node has annotations).
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels,
			Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
		Spec: corev1.NodeSpec{PodCIDR: n.PodV4.String(), PodCIDRs: []string{n.PodV4.String(), n.PodV6.String()}},
	}
	created, err := n.lab.Client.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create Node %s: %w", n.Name, err)
	}
	n.lab.onClose(func() {
		_ = n.lab.Client.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{})
	})
	created.Status = corev1.NodeStatus{
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: n.IPv4.String()},
			{Type: corev1.NodeInternalIP, Address: n.IPv6.String()},
			{Type: corev1.NodeHostName, Address: n.Name},
		},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
	}
	_, err = n.lab.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

// Dial connects from inside the node's namespace (e.g. to the agent's metrics).
func (n *Node) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.NS.Do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// IngressPrograms lists the programs at ingress of one of the node's interfaces, in the order
// they run.
func (n *Node) IngressPrograms(ifname string) ([]tc.Program, error) {
	var out []tc.Program
	err := n.NS.Do(func() (err error) {
		out, err = tc.Query(ifname)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("programs at ingress of %s/%s: %w", n.Name, ifname, err)
	}
	return out, nil
}

// PodFacing is the node interface that faces a pod: its veth (routed), or the bridge.
func (p *Pod) PodFacing() string {
	if p.Node.CNI.Bridges() {
		return "cni0"
	}
	return p.HostLink
}

// Serve runs the observing TCP and UDP servers on the node's addresses (as a hostNetwork pod
// would), for pod-to-node checks.
func (n *Node) Serve(ports ...uint16) error {
	o := newObserver(n.Name)
	n.lab.onClose(o.close)
	return o.start(n.NS, []netip.Addr{n.IPv4, n.IPv6}, ports)
}
