package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/egressd/egressd/test/toolbuild"
)

// A Cilium cluster as its Helm chart installs it with these values: tunnel routing (VXLAN),
// ipam "kubernetes" (each node's spec.podCIDRs), kube-proxy replacement and socket LB off,
// legacy host routing and iptables masquerade (the path through the host's netfilter and
// routing), identities in CRDs, no Hubble, no L7 proxy, no health probes, and
// enableIdentityMark false, which egressd's steering needs (docs/compat.md). Pods get
// cilium-cni.
//
// Every lab node is a network namespace on one machine, while cilium-agent keeps its state at
// fixed paths (/var/run/cilium, the BPF filesystem, /sys/class/net): each agent runs in its own
// mount namespace holding its node's state directory at /var/run/cilium, a BPF filesystem of
// its own and the sysfs of its network namespace.

// ciliumUser is the lab's identity of cilium-agent. The lab proves the datapath, not Cilium's
// RBAC: the agent is bound to cluster-admin.
const ciliumUser = "lab:cilium"

const ciliumRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "lab:cilium"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "lab:cilium"}
`

// ciliumLLVM holds the clang Cilium compiles its programs with (Debian's clang-19): the
// machine's default clang is older than Cilium supports.
const ciliumLLVM = "/usr/lib/llvm-19/bin"

// ciliumDir holds a node's Cilium state (its /var/run/cilium) and the CNI plugin's wrapper.
func (n *Node) ciliumDir() string { return filepath.Join(n.lab.Dir, n.Name, "cilium") }

// ciliumNodeConfig is the node configuration header the node's Cilium agent builds its
// programs with (its /var/run/cilium/state/globals); absent on a node without Cilium.
func (n *Node) ciliumNodeConfig() string {
	return filepath.Join(n.ciliumDir(), "run", "state", "globals", "node_config.h")
}

// ciliumSocket is the node's cilium-agent API, as the root mount namespace sees it.
func (n *Node) ciliumSocket() string { return filepath.Join(n.ciliumDir(), "run", "cilium.sock") }

// ciliumArgs are the agent's flags of the lab's Cilium mode.
func ciliumArgs(kubeconfig string) []string {
	return []string{
		"--k8s-kubeconfig-path=" + kubeconfig, "--ipam=kubernetes", "--identity-allocation-mode=crd",
		"--routing-mode=tunnel", "--tunnel-protocol=vxlan", "--enable-ipv4=true", "--enable-ipv6=true",
		"--kube-proxy-replacement=false", "--bpf-lb-sock=false", "--enable-host-legacy-routing=true",
		"--enable-bpf-masquerade=false", "--enable-ipv4-masquerade=true", "--enable-ipv6-masquerade=true",
		"--enable-l7-proxy=false", "--enable-health-checking=false", "--enable-endpoint-health-checking=false",
		"--enable-hubble=false", "--devices=eth0", "--cni-exclusive=false", "--enable-identity-mark=false",
	}
}

// startCilium installs Cilium's CRDs, runs cilium-agent on every node and waits until each
// reports itself healthy.
func (l *Lab) startCilium(ctx context.Context) error {
	bin, src, err := toolbuild.Cilium(l.opts.Log)
	if err != nil {
		return err
	}
	if err := l.installCiliumCRDs(ctx, src); err != nil {
		return err
	}
	if err := l.Kube.Apply(ctx, "", ciliumRBAC); err != nil {
		return fmt.Errorf("cilium's RBAC: %w", err)
	}
	kubeconfig, err := l.CP.KubeconfigAt("https://"+apiForwardAddr, ciliumUser)
	if err != nil {
		return err
	}
	// The mount points the agents' private mounts go on (empty directories of the machine).
	if err := os.MkdirAll("/var/run/cilium", 0o755); err != nil {
		return err
	}
	for _, n := range l.Nodes {
		if err := n.forwardAPIOnce(); err != nil {
			return err
		}
		for _, d := range []string{"run", "lib", "cni"} {
			if err := os.MkdirAll(filepath.Join(n.ciliumDir(), d), 0o755); err != nil {
				return err
			}
		}
		// The agent compiles its programs from <lib-dir>/bpf.
		if err := os.Symlink(filepath.Join(src, "bpf"), filepath.Join(n.ciliumDir(), "lib", "bpf")); err != nil {
			return err
		}
		if err := n.writeCiliumCNI(bin); err != nil {
			return err
		}
		mounts := strings.Join([]string{
			"umount -l /sys", "mount -t sysfs sysfs /sys", "mount -t bpf bpf /sys/fs/bpf",
			"mount --bind " + filepath.Join(n.ciliumDir(), "run") + " /var/run/cilium",
			`exec "$@"`}, " && ")
		argv := append([]string{"unshare", "--mount", "--propagation", "private", "sh", "-c", mounts, "cilium-agent",
			filepath.Join(bin, "daemon"), "--lib-dir=" + filepath.Join(n.ciliumDir(), "lib")}, append(ciliumArgs(kubeconfig), l.opts.CiliumArgs...)...)
		env := []string{"K8S_NODE_NAME=" + n.Name, "CILIUM_K8S_NAMESPACE=kube-system", "PATH=" + ciliumLLVM + ":" + os.Getenv("PATH")}
		if err := n.startDaemon(ctx, "cilium-agent", env, argv, func() error { return n.ciliumHealthy(ctx) }); err != nil {
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

// installCiliumCRDs applies the CRDs of Cilium's module, as cilium-operator does at start.
func (l *Lab) installCiliumCRDs(ctx context.Context, src string) error {
	files, err := filepath.Glob(filepath.Join(src, "pkg", "k8s", "apis", "cilium.io", "client", "crds", "*", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in Cilium's module at %s: %v", src, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := l.Kube.Apply(ctx, "", string(b)); err != nil {
			return fmt.Errorf("Cilium CRD %s: %w", filepath.Base(f), err)
		}
	}
	return nil
}

// writeCiliumCNI puts cilium-cni in the node's plugin directory, behind a wrapper that points
// it at the node's agent.
func (n *Node) writeCiliumCNI(bin string) error {
	script := fmt.Sprintf("#!/bin/sh\nCILIUM_SOCK=%s exec %s \"$@\"\n", n.ciliumSocket(), filepath.Join(bin, "cilium-cni"))
	return os.WriteFile(filepath.Join(n.ciliumDir(), "cni", "cilium-cni"), []byte(script), 0o755)
}

// ciliumPrimary is the plugin configuration Cilium's agent writes (05-cilium.conflist).
func (n *Node) ciliumPrimary() map[string]any {
	return map[string]any{"type": "cilium-cni", "enable-debug": false, "log-file": filepath.Join(n.ciliumDir(), "cilium-cni.log")}
}

// ciliumHealthy asks the node's agent its health, as cilium-dbg status does.
func (n *Node) ciliumHealthy(ctx context.Context) error {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", n.ciliumSocket())
		}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://cilium/v1/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var s struct {
		Cilium struct{ State, Msg string } `json:"cilium"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return fmt.Errorf("cilium-agent's health on %s: %w", n.Name, err)
	}
	if s.Cilium.State != "Ok" {
		return fmt.Errorf("cilium-agent on %s: %s %s", n.Name, s.Cilium.State, s.Cilium.Msg)
	}
	return nil
}

// CiliumNativeRouting are the agent flags of Cilium's native routing (Helm routingMode native,
// autoDirectNodeRoutes true) for the lab's cluster networks: pods' packets to other nodes leave
// eth0 unencapsulated, along the routes each agent adds to the other nodes' pod CIDRs.
func CiliumNativeRouting() []string {
	return []string{"--routing-mode=native", "--auto-direct-node-routes=true",
		"--ipv4-native-routing-cidr=" + ClusterCIDRs[0].String(), "--ipv6-native-routing-cidr=" + ClusterCIDRs[1].String()}
}

// CiliumKubeProxyReplacement are the agent flags of Cilium's kube-proxy replacement (Helm
// kubeProxyReplacement true) as the lab can run it, with what egressd needs: Services
// translated in Cilium's tc programs only, no kube-proxy, and no wildcard service entries
// (they drop the replies to EgressServices' load-balancer IPs: docs/compat.md). Socket LB
// stays off: it attaches to the cgroup root, which every lab node shares.
func CiliumKubeProxyReplacement() []string {
	return []string{"--kube-proxy-replacement=true", "--bpf-lb-sock=false", "--bpf-lb-enable-wildcard-entries=false"}
}

// CiliumBPFMasquerade are the flags of kube-proxy replacement with Cilium's BPF masquerading
// (Helm bpf.masquerade true) in place of iptables', and legacy host routing kept (Helm
// bpf.hostLegacyRouting true), as egressd needs: pods' traffic leaving the cluster is
// masqueraded in cil_to_netdev at eth0's egress, after the host's netfilter.
func CiliumBPFMasquerade() []string {
	return append(CiliumKubeProxyReplacement(), "--enable-bpf-masquerade=true", "--enable-host-legacy-routing=true")
}
