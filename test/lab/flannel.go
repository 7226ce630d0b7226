package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/toolbuild"
)

// A flannel cluster, as flannel's manifest installs it: flanneld on every node with the
// Kubernetes subnet manager (each node's spec.podCIDRs), the VXLAN backend (flannel.1 and
// flannel-v6.1, VNI 1, port 8472) and its masquerade (--ip-masq: iptables rules that
// masquerade pod traffic leaving the cluster network); pods get the configuration flannel's
// CNI plugin delegates to: bridge cni0 (gateway, hairpin, the overlay's MTU) and host-local
// from the subnet flanneld wrote (the plugin's own module is not served here).

// flannelUser is the lab's identity of flanneld, bound to the rights flannel's manifest gives it.
const flannelUser = "lab:flannel"

const flannelRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "lab:flannel"}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get]}
- {apiGroups: [""], resources: [nodes], verbs: [get, list, watch]}
- {apiGroups: [""], resources: [nodes/status], verbs: [patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "lab:flannel"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "lab:flannel"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "lab:flannel"}
`

// flannelDir holds a node's subnet.env.
func (n *Node) flannelDir() string { return filepath.Join(n.lab.Dir, n.Name, "flannel") }

// startFlannel runs flanneld on every node and waits until each has written its subnet file
// and routes every other node's pod CIDRs through its VXLAN devices.
func (l *Lab) startFlannel(ctx context.Context) error {
	dir, err := toolbuild.Flannel(l.opts.Log)
	if err != nil {
		return err
	}
	if err := l.Kube.Apply(ctx, "", flannelRBAC); err != nil {
		return fmt.Errorf("flannel's RBAC: %w", err)
	}
	kubeconfig, err := l.CP.KubeconfigAt("https://"+apiForwardAddr, flannelUser)
	if err != nil {
		return err
	}
	netConf, err := json.Marshal(map[string]any{
		"Network": ClusterCIDRs[0].String(), "IPv6Network": ClusterCIDRs[1].String(), "EnableIPv6": true,
		"Backend": map[string]string{"Type": "vxlan"},
	})
	if err != nil {
		return err
	}
	netConfPath := filepath.Join(l.Dir, "flannel-net-conf.json")
	if err := os.WriteFile(netConfPath, netConf, 0o644); err != nil {
		return err
	}
	for _, n := range l.Nodes {
		if err := n.forwardAPIOnce(); err != nil {
			return err
		}
		if err := makeDir(n.flannelDir()); err != nil {
			return err
		}
		argv := []string{filepath.Join(dir, "flannel"), "--kube-subnet-mgr", "--kubeconfig-file", kubeconfig,
			"--net-config-path", netConfPath, "--subnet-file", filepath.Join(n.flannelDir(), "subnet.env"),
			"--iface", "eth0", "--ip-masq", "-v", "2"}
		if err := n.startDaemon(ctx, "flanneld", []string{"NODE_NAME=" + n.Name}, argv, func() error {
			_, err := n.flannelSubnet()
			return err
		}); err != nil {
			return err
		}
	}
	// Each flanneld routes a peer's subnets once it has seen the peer's VTEP in its Node's
	// annotations.
	for _, n := range l.Nodes {
		if err := poll.Until(ctx, "flanneld on "+n.Name+" routes to every node's pods", time.Minute, func() error {
			for _, o := range l.Nodes {
				if o == n {
					continue
				}
				for _, route := range [][]string{{"ip", "-4", "route", "show", o.PodV4.String()}, {"ip", "-6", "route", "show", o.PodV6.String()}} {
					out, err := n.NS.Run(route[0], route[1:]...)
					if err != nil {
						return err
					}
					if !strings.Contains(out, "dev flannel") {
						return fmt.Errorf("no route to %s's pods through flannel: %q", o.Name, out)
					}
				}
			}
			return nil
		}); err != nil {
			return err
		}
		if l.opts.InstallCNI {
			if err := n.WritePrimaryCNI(); err != nil {
				return err
			}
		}
	}
	return nil
}

// flannelEnv is what flanneld wrote in the node's subnet file.
type flannelEnv struct {
	network, network6 netip.Prefix
	subnet, subnet6   netip.Prefix
	mtu               int
	ipMasq            bool
}

func (n *Node) flannelSubnet() (flannelEnv, error) {
	var e flannelEnv
	b, err := os.ReadFile(filepath.Join(n.flannelDir(), "subnet.env"))
	if err != nil {
		return e, err
	}
	kv := map[string]string{}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			kv[k] = v
		}
	}
	for _, f := range []struct {
		key string
		to  *netip.Prefix
	}{{"FLANNEL_NETWORK", &e.network}, {"FLANNEL_SUBNET", &e.subnet}, {"FLANNEL_IPV6_NETWORK", &e.network6}, {"FLANNEL_IPV6_SUBNET", &e.subnet6}} {
		if *f.to, err = netip.ParsePrefix(kv[f.key]); err != nil {
			return e, fmt.Errorf("%s's subnet file: %s: %w", n.Name, f.key, err)
		}
	}
	if e.mtu, err = strconv.Atoi(kv["FLANNEL_MTU"]); err != nil {
		return e, fmt.Errorf("%s's subnet file: FLANNEL_MTU: %w", n.Name, err)
	}
	e.ipMasq = kv["FLANNEL_IPMASQ"] == "true"
	return e, nil
}

// flannelPrimary is the plugin configuration flannel's CNI plugin delegates to, from the
// node's subnet file and the delegate of flannel's default conflist ({"hairpinMode": true,
// "isDefaultGateway": true}).
func (n *Node) flannelPrimary(dataDir string) (map[string]any, error) {
	e, err := n.flannelSubnet()
	if err != nil {
		return nil, err
	}
	return map[string]any{"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true,
		"hairpinMode": true, "ipMasq": !e.ipMasq, "mtu": e.mtu,
		"ipam": map[string]any{
			"type": "host-local", "dataDir": dataDir,
			"ranges": [][]map[string]string{{{"subnet": e.subnet.Masked().String()}}, {{"subnet": e.subnet6.Masked().String()}}},
			"routes": []map[string]string{{"dst": e.network.String()}, {"dst": e.network6.String()}},
		},
	}, nil
}
