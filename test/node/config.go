package node

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/egressd/egressd/test/lab"
)

// writeCNI writes the node's conflist: ptp with host-local IPAM on the node's pod CIDRs, then
// egressd's chained plugin if asked.
func (n *Node) writeCNI() error {
	for _, dir := range n.opts.CNIPlugins {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := os.Symlink(filepath.Join(dir, e.Name()), n.path("cni", "bin", e.Name())); err != nil && !os.IsExist(err) {
				return err
			}
		}
	}
	plugins := []map[string]any{
		{"type": "ptp", "ipMasq": false, "ipam": map[string]any{
			"type": "host-local", "dataDir": n.path("ipam"),
			"ranges": [][]map[string]string{
				{{"subnet": n.ln.PodV4.String(), "gateway": n.ln.PodV4.Addr().Next().String()}},
				{{"subnet": n.ln.PodV6.String(), "gateway": n.ln.PodV6.Addr().Next().String()}},
			},
			"routes": []map[string]string{{"dst": "0.0.0.0/0"}, {"dst": "::/0"}},
		}},
	}
	if n.opts.EgressdCNI {
		plugins = append(plugins, map[string]any{"type": "egressd-cni", "socket": CNISocket, "timeout": "10s"})
	}
	conf := map[string]any{"cniVersion": lab.CNIVersion, "name": "realnode", "plugins": plugins}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(n.path("cni", "net.d", "10-realnode.conflist"), b, 0o644)
}

// writeContainerdConfig writes containerd's configuration (version 3, containerd 2.x): all its
// state under the node's directory, the CRI with Debian's runc (cgroupfs), the node's CNI
// configuration and the lab's pause image.
func (n *Node) writeContainerdConfig() error {
	cfg := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
# Plugins that need what this machine lacks, or that the node does not use.
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.differ.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[5]q

[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  # Root here lacks CAP_SYS_RESOURCE (not in the bounding set): no process may lower its
  # oom_score_adj, so the CRI's -998 for sandboxes (and the kubelet's -997 for node-critical
  # pods) are raised to containerd's own 0 instead of failing runc.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[6]q]
    conf_dir = %[7]q
    max_conf_num = 1
    use_internal_loopback = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[8]q
        SystemdCgroup = false

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true

[plugins.'io.containerd.internal.v1.opt']
  path = %[9]q
`, n.path("containerd", "root"), n.path("containerd", "state"), n.Socket, n.Socket+".ttrpc",
		n.opts.PauseImage, n.path("cni", "bin"), n.path("cni", "net.d"), n.runc, n.path("containerd", "opt"))
	return os.WriteFile(n.path("containerd", "config.toml"), []byte(cfg), 0o644)
}

// kubeletConfig is the kubelet's KubeletConfiguration for this machine and the lab.
func (n *Node) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine mounts cgroup v1 controllers; kubelets >= 1.35 refuse them unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%[1]s
cgroupsPerQOS: true
containerRuntimeEndpoint: unix://%[2]s
address: %[3]s
port: 10250
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
# The node's view of the tunables is what the kubelet wants (see sysctls); never write them.
protectKernelDefaults: true
failSwapOn: false
# No CAP_SYS_RESOURCE here (see restrict_oom_score_adj): keep the kubelet's own score.
oomScoreAdj: 0
resolvConf: ""
podLogsDir: %[4]s
# The machine's disk is shared with other work: never evict the lab's pods for it.
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
nodeStatusUpdateFrequency: 4s
syncFrequency: 5s
fileCheckFrequency: 5s
`, n.Cgroup, n.Socket, n.ln.IPv4, n.path("pod-logs"))
}
