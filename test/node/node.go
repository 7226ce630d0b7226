// Package node runs a real Kubernetes node inside a lab node's network namespace: containerd
// 2.x with Debian's runc and a real CNI chain, and a kubelet registered with the lab's control
// plane, so that workloads (the DaemonSet of deploy/ among them) reach the node only through
// the API server, as on a cluster.
//
// The node is a network namespace (the lab's) plus a mount namespace of its own, in which it
// has a private /run (containerd's and runc's state, the pods' network namespaces,
// /run/egressd), /var/log, /var/lib and bpffs at /sys/fs/bpf, and in which the kernel tunables the
// kubelet insists on read as it wants them (the machine's stay untouched). Its processes live
// in one cgroup subtree, egressd-node-<lab>-<node>, in every cgroup v1 hierarchy and the
// unified one. Close kills every process of that subtree, which ends the mount namespace and
// with it every mount; nothing stays on the machine.
//
// The machine mounts cgroup v1 controllers (a hybrid hierarchy): the kubelet runs with
// failCgroupV1: false and the cgroupfs driver; containerd's runc shim uses cgroupfs too.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/spawn"
)

// apiServiceAddr is the kubernetes Service (the first address of the service CIDR): pods of the
// node reach the API server there, as in-cluster clients do, through the lab's relay (no
// kube-proxy runs).
const apiServiceAddr = "10.96.0.1:443"

// apiNodeAddr is where the kubelet reaches the API server inside the node.
const apiNodeAddr = "127.0.0.1:6443"

// CNISocket is egressd-cni's socket as the DaemonSet mounts it (--cni-socket), inside the node.
const CNISocket = "/run/egressd/cni.sock"

// sysctls are the kernel tunables the kubelet checks and would set machine-wide
// (protectKernelDefaults: false); the node's view of them is a file with the wanted value.
var sysctls = map[string]string{
	"vm/overcommit_memory": "1",
	"vm/panic_on_oom":      "0",
	"kernel/panic":         "10",
	"kernel/panic_on_oops": "1",
}

// Options of Start.
type Options struct {
	// Lab and Node: the node must be one of the lab's Options.Kubelets.
	Lab  *lab.Lab
	Node *lab.Node
	// Bins are the node's programs (Build).
	Bins Binaries
	// CNIPlugins are directories holding ptp, host-local and (with EgressdCNI) egressd-cni.
	CNIPlugins []string
	// EgressdCNI chains egressd's plugin after ptp, on the DaemonSet's socket (CNISocket): pods
	// then start only while egressd runs on the node.
	EgressdCNI bool
	// PauseImage is the sandbox image; it must be imported (Import) before pods start.
	PauseImage string
	// Log receives progress; default io.Discard.
	Log io.Writer
}

// Node is a running real node.
type Node struct {
	Name string
	// Dir holds the node's state: containerd's, the kubelet's, pod logs, CNI configuration.
	Dir string
	// Socket is containerd's API socket.
	Socket string
	// Cgroup is the node's cgroup subtree (relative to each hierarchy's root).
	Cgroup string

	lab        *lab.Lab
	ln         *lab.Node
	opts       Options
	runc       string
	containerd *daemon
	kubelet    *daemon
	// mountNSIno identifies the node's mount namespace, for Leftovers.
	mountNSIno uint64
	// hostPathsBefore: which of hostDefaults existed on the machine before the node started.
	hostPathsBefore map[string]bool
}

// daemon is a started process of the node; exited is closed when it has exited.
type daemon struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func (d *daemon) done() bool {
	select {
	case <-d.exited:
		return true
	default:
		return false
	}
}

// Start runs containerd and the kubelet in the lab node and waits until the kubelet has
// registered the Node and, without EgressdCNI, reports it Ready.
func Start(ctx context.Context, opts Options) (*Node, error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if !opts.Node.Kubelet {
		return nil, fmt.Errorf("node %s: not one of the lab's Options.Kubelets", opts.Node.Name)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return nil, fmt.Errorf("node %s: runc not found (hack/install-deps.sh installs Debian's): %w", opts.Node.Name, err)
	}
	Sweep(opts.Log)
	n := &Node{
		Name: opts.Node.Name, Dir: filepath.Join(opts.Lab.Dir, "kubelet-"+opts.Node.Name),
		Cgroup: fmt.Sprintf("egressd-node-%s-%s", opts.Lab.ID, opts.Node.Name),
		lab:    opts.Lab, ln: opts.Node, opts: opts, runc: runc,
	}
	n.Socket = filepath.Join(n.Dir, "containerd", "containerd.sock")
	n.hostPathsBefore = map[string]bool{}
	for _, p := range hostDefaults {
		_, err := os.Lstat(p)
		n.hostPathsBefore[p] = err == nil
	}
	if err := n.start(ctx); err != nil {
		n.Close()
		return nil, fmt.Errorf("real node %s: %w", n.Name, err)
	}
	return n, nil
}

// CNIConfDir and CNIBinDir are the node's CNI directories (containerd's conf_dir and bin_dirs):
// what a DaemonSet mounts as the host's /etc/cni/net.d and /opt/cni/bin.
func (n *Node) CNIConfDir() string { return n.path("cni", "net.d") }

func (n *Node) CNIBinDir() string { return n.path("cni", "bin") }

func (n *Node) path(p ...string) string { return filepath.Join(append([]string{n.Dir}, p...)...) }

func (n *Node) logf(format string, a ...any) { fmt.Fprintf(n.opts.Log, format+"\n", a...) }

func (n *Node) start(ctx context.Context) error {
	start := time.Now()
	for _, d := range []string{"containerd/root", "containerd/state", "kubelet", "pod-logs", "cni/net.d", "cni/bin", "ipam", "sysctl"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return err
		}
	}
	if err := n.writeCNI(); err != nil {
		return err
	}
	if err := n.writeContainerdConfig(); err != nil {
		return err
	}
	for name, v := range sysctls {
		if err := os.WriteFile(n.path("sysctl", strings.ReplaceAll(name, "/", "_")), []byte(v+"\n"), 0o644); err != nil {
			return err
		}
	}
	if err := createCgroup(n.Cgroup); err != nil {
		return err
	}
	// The API server, for the kubelet and for the node's pods (in-cluster clients).
	if err := n.ln.NS.Script("ip addr add " + strings.Split(apiServiceAddr, ":")[0] + "/32 dev lo"); err != nil {
		return err
	}
	for _, a := range []string{apiNodeAddr, apiServiceAddr} {
		if err := n.ln.ForwardAPI(a); err != nil {
			return err
		}
	}
	if err := n.startContainerd(ctx); err != nil {
		return err
	}
	if err := n.startKubelet(ctx); err != nil {
		return err
	}
	n.logf("real node %s: containerd and kubelet up, Node registered in %s", n.Name, time.Since(start).Round(time.Millisecond))
	return nil
}

// startContainerd starts the node's mount namespace with containerd as its first process.
func (n *Node) startContainerd(ctx context.Context) error {
	script := []string{"set -e", joinCgroup(n.Cgroup + "/runtime"),
		"mount -t tmpfs -o mode=0755 node-run /run",
		"mount -t tmpfs -o mode=0755 node-log /var/log",
		// The kubelet's device-plugin directory and libcni's result cache (neither follows
		// --root-dir or the CNI configuration) land in the node's own /var/lib.
		"mount -t tmpfs -o mode=0755 node-lib /var/lib",
		// The node's own bpffs, instead of the machine's (gone from this namespace: the CRI
		// looks at the first mount on the path). The DaemonSet mounts it with HostToContainer
		// propagation, which the CRI grants only from a shared or slave mount.
		"umount /sys/fs/bpf 2>/dev/null || true",
		"mount -t bpf bpf /sys/fs/bpf", "mount --make-rshared /sys/fs/bpf"}
	for name := range sysctls {
		script = append(script, fmt.Sprintf("mount --bind %s /proc/sys/%s", n.path("sysctl", strings.ReplaceAll(name, "/", "_")), name))
	}
	script = append(script, fmt.Sprintf("exec %s --config %s", n.opts.Bins.Containerd, n.path("containerd", "config.toml")))
	cmd := exec.Command("nsenter", "--net="+n.ln.NS.Path(), "unshare", "--mount", "--propagation", "slave",
		"sh", "-c", strings.Join(script, "\n"))
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(n.opts.Bins.Shim)+":"+os.Getenv("PATH"))
	var err error
	if n.containerd, err = n.run(cmd, "containerd"); err != nil {
		return err
	}
	n.logf("real node %s: containerd starting (pid %d)", n.Name, n.containerd.cmd.Process.Pid)
	return waitFor(ctx, 30*time.Second, "containerd socket "+n.Socket, func() error {
		if n.mountNSIno == 0 {
			if ino := nsIno(n.mountNS()); ino != nsIno("/proc/self/ns/mnt") {
				n.mountNSIno = ino // unshare has made it
			}
		}
		if n.containerd.done() {
			return errStop(fmt.Errorf("containerd exited:\n%s", n.LogTail("containerd", 30)))
		}
		if n.mountNSIno == 0 {
			return errors.New("no mount namespace yet")
		}
		_, err := os.Stat(n.Socket)
		return err
	})
}

func (n *Node) startKubelet(ctx context.Context) error {
	kubeconfig, err := n.lab.CP.KubeconfigAt("https://"+apiNodeAddr, "system:node:"+n.Name, "system:nodes")
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.path("kubelet", "config.yaml"), []byte(n.kubeletConfig()), 0o644); err != nil {
		return err
	}
	script := []string{"set -e", joinCgroup(n.Cgroup + "/runtime"),
		fmt.Sprintf("exec nsenter --net=%s --mount=%s %s --config %s --kubeconfig %s --root-dir %s --cert-dir %s --hostname-override %s --node-ip %s,%s --v 2",
			n.ln.NS.Path(), n.mountNS(), n.opts.Bins.Kubelet, n.path("kubelet", "config.yaml"), kubeconfig,
			n.path("kubelet"), n.path("kubelet", "pki"), n.Name, n.ln.IPv4, n.ln.IPv6)}
	if n.kubelet, err = n.run(exec.Command("sh", "-c", strings.Join(script, "\n")), "kubelet"); err != nil {
		return err
	}
	n.logf("real node %s: kubelet starting (pid %d)", n.Name, n.kubelet.cmd.Process.Pid)
	// With egressd-cni chained, the runtime's network is ready only once egressd answers
	// (the plugin's STATUS): the Node stays NotReady until the DaemonSet's pod runs.
	ready := !n.opts.EgressdCNI
	if err := n.waitNode(ctx, ready); err != nil {
		return err
	}
	// No node IPAM controller runs: record the CIDRs the node's CNI hands out, as it would.
	patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q,%q]}}`, n.ln.PodV4, n.ln.PodV4, n.ln.PodV6)
	_, err = n.lab.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// WaitReady waits until the kubelet reports the Node Ready.
func (n *Node) WaitReady(ctx context.Context) error { return n.waitNode(ctx, true) }

// waitNode waits until the kubelet has registered the Node and reported its Ready condition,
// True if ready.
func (n *Node) waitNode(ctx context.Context, ready bool) error {
	err := waitFor(ctx, 2*time.Minute, "Node "+n.Name+" registered", func() error {
		if n.kubelet.done() {
			return errStop(fmt.Errorf("kubelet exited:\n%s", n.LogTail("kubelet", 40)))
		}
		obj, err := n.lab.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range obj.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if ready && c.Status != corev1.ConditionTrue {
					return fmt.Errorf("not Ready: %s: %s", c.Reason, c.Message)
				}
				return nil
			}
		}
		return errors.New("no Ready condition yet")
	})
	if err != nil {
		return fmt.Errorf("%w\nkubelet:\n%s", err, n.LogTail("kubelet", 40))
	}
	return nil
}

// run starts a daemon of the node with its output in <dir>/<name>.log, killed with this process.
func (n *Node) run(cmd *exec.Cmd, name string) (*daemon, error) {
	logf, err := os.Create(n.path(name + ".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := spawn.Start(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(d.exited) }()
	return d, nil
}

// Close stops the kubelet, kills every process of the node (containerd, shims, containers),
// removes its cgroups and its Node object. The mount namespace, and every mount in it, ends
// with its last process.
func (n *Node) Close() {
	if n.kubelet != nil {
		_ = n.kubelet.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.kubelet.exited:
		case <-time.After(10 * time.Second):
			_ = n.kubelet.cmd.Process.Kill()
		}
	}
	if err := removeCgroup(n.Cgroup); err != nil {
		n.logf("real node %s: %v", n.Name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.lab.Client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		n.logf("real node %s: delete Node: %v", n.Name, err)
	}
}

// stopError ends waitFor at once.
type stopError struct{ error }

func errStop(err error) error { return stopError{err} }

// waitFor polls check until it returns nil, a stopError, or d passes.
func waitFor(ctx context.Context, d time.Duration, what string, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		err := check()
		if err == nil {
			return nil
		}
		var stop stopError
		if errors.As(err, &stop) {
			return stop.error
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not after %s: %w", what, d, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
