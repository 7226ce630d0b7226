// Package lab is a Kubernetes cluster on one machine: a real control plane, nodes that are
// network namespaces on a shared L2 fabric (a bridge in its own namespace) with routed or
// bridged pods, external hosts with servers that report what they saw, and egressd running in
// each node's namespace exactly as in production. Every address lives in a namespace the lab
// created; nothing is added to the machine's root namespace but the namespace handles.
package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
	"github.com/egressd/egressd/test/netns"
)

// CNI is the shape of a node's pod networking.
type CNI string

const (
	// Routed pods: one veth per pod, a /32 and /128 route to it on the node (Calico style).
	Routed CNI = "routed"
	// Bridged pods: veths enslaved to a node bridge that holds the pod gateway (bridge CNI).
	Bridged CNI = "bridged"
	// Flannel: flanneld's VXLAN overlay and masquerade, pods on the bridge its CNI plugin
	// delegates to (flannel.go). A cluster-wide choice: every node of the lab, or none.
	Flannel CNI = "flannel"
	// Cilium: cilium-agent's VXLAN tunnel, pods on cilium-cni's veths (cilium.go). A
	// cluster-wide choice, as Flannel.
	Cilium CNI = "cilium"
)

// overlay says whether the CNI is the whole cluster's (every node runs it, or none does).
func (c CNI) overlay() bool { return c == Flannel || c == Cilium }

// Bridges says whether the node's pods hang off a bridge (cni0) rather than a routed veth each.
func (c CNI) Bridges() bool { return c == Bridged || c == Flannel }

// Addressing of the lab.
var (
	ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")}
	ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:10:96::/112")}
	fabricV4     = "172.18.0.%d"
	fabricV6     = "fc00:f853:ccd:e793::%x"
)

// KubeProxyNone runs no kube-proxy: the CNI translates Services itself
// (CiliumKubeProxyReplacement).
const KubeProxyNone = "none"

// Options of a lab.
type Options struct {
	// Nodes is the number of nodes (default 3).
	Nodes int
	// CNI per node index; nodes not listed are Routed.
	CNI map[int]CNI
	// NodeLabels per node index.
	NodeLabels map[int]map[string]string
	// NodePrefix names nodes <prefix>node-<i> (labs sharing a control plane need distinct ones).
	NodePrefix string
	// Kubelets lists the indices of nodes that a real kubelet runs (test/node): the lab builds
	// their namespace and network, the kubelet registers their Node object.
	Kubelets []int
	// Agents starts egressd on every node (but those of Kubelets).
	Agents bool
	// AgentArgs are extra egressd flags.
	AgentArgs []string
	// ReadyTimeout bounds the wait for a started agent or controller to be ready (default a
	// minute; a cluster of thousands of nodes takes longer to sync).
	ReadyTimeout time.Duration
	// ControllerNodes are the indices of the nodes in whose namespace a replica of egressd
	// controller runs with the agents (as a hostNetwork pod would; default: the first node
	// that no kubelet runs). ControllerArgs are its extra flags.
	ControllerNodes []int
	ControllerArgs  []string
	// InstallCNI gives each node a CNI configuration directory holding only its primary
	// plugin's list and an empty plugin directory, and lets the agent install egressd-cni there
	// (--cni-conf-dir); pods are then created from the first file of that directory, as
	// containerd does.
	InstallCNI bool
	// AgentWrap runs each agent through a command once in its node's namespace, e.g. setpriv
	// restricting it to the DaemonSet's capabilities; default DefaultAgentWrap.
	AgentWrap []string
	// KubeProxy is what StartKubeProxy runs on every node: "" the stand-in (kubeproxy.go), or
	// "iptables" or "nftables", the real kube-proxy (test/tools/node) in that mode, or
	// KubeProxyNone. IPVS is not offered: the development machines' kernels have no IP_VS.
	KubeProxy string
	// CiliumArgs are cilium-agent flags after the lab's own (the last of a flag wins), on a
	// Cilium lab.
	CiliumArgs []string
	// Log receives progress; default io.Discard.
	Log io.Writer
}

// DefaultAgentWrap is the AgentWrap of labs whose Options set none.
var DefaultAgentWrap []string

// Lab is one running lab.
type Lab struct {
	ID     string
	Dir    string
	CP     *controlplane.ControlPlane
	Client kubernetes.Interface
	Kube   *kube.Client
	Fabric *netns.NS
	Nodes  []*Node

	opts      Options
	mu        sync.Mutex
	externals []*External
	cleanups  []func()
	nsSeq     int
}

// StateRoot holds a directory per running lab: owner pid, agent logs, kubeconfigs.
func StateRoot() string { return filepath.Join(os.TempDir(), "egressd-lab") }

// New builds a lab for a test on the test binary's shared control plane and tears it down when
// the test ends (printing agent logs if it failed).
func New(t testing.TB, opts Options) *Lab {
	t.Helper()
	cp := controlplane.Shared(t)
	if opts.Log == nil {
		opts.Log = testWriter{t}
	}
	l, err := Start(context.Background(), cp, opts)
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range l.Nodes {
				if n.Agent != nil {
					t.Logf("egressd on %s:\n%s", n.Name, tail(n.Agent.Log(), 60))
				}
				if n.Controller != nil {
					t.Logf("egressd controller on %s:\n%s", n.Name, tail(n.Controller.Log(), 60))
				}
			}
		}
		l.Close()
	})
	return l
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Start builds a lab on cp. Close tears it down; Sweep removes what a killed run left.
func Start(ctx context.Context, cp *controlplane.ControlPlane, opts Options) (*Lab, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	Sweep(opts.Log)
	idb := make([]byte, 3)
	_, _ = rand.Read(idb)
	l := &Lab{ID: hex.EncodeToString(idb), CP: cp, opts: opts}
	l.Dir = filepath.Join(StateRoot(), l.ID)
	if err := makeDir(l.Dir); err != nil {
		return nil, err
	}
	var err error
	if l.Client, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return nil, err
	}
	if l.Kube, err = kube.NewClient(cp.Config); err != nil {
		return nil, err
	}
	if err := l.build(ctx); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (l *Lab) logf(format string, a ...any) { fmt.Fprintf(l.opts.Log, format+"\n", a...) }

// newNS creates a namespace named el<id>-<name>, removed by Close or Sweep.
func (l *Lab) newNS(name string) (*netns.NS, error) {
	ns, err := netns.Create(fmt.Sprintf("el%s-%s", l.ID, name))
	if err != nil {
		return nil, err
	}
	l.onClose(func() { ns.Delete() })
	// No duplicate address detection on links created later (link-local addresses included):
	// in a lab that nobody else shares, DAD only delays the first packets by a second or two.
	return ns, ns.Script("sysctl -qw net.ipv6.conf.default.accept_dad=0", "sysctl -qw net.ipv6.conf.all.accept_dad=0")
}

func (l *Lab) onClose(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cleanups = append(l.cleanups, f)
}

// overlay is the CNI that runs every node of the lab, if one does (Options.CNI: all of them,
// or an error).
func (l *Lab) overlay() CNI {
	if l.opts.CNI[0].overlay() {
		return l.opts.CNI[0]
	}
	return ""
}

func (l *Lab) build(ctx context.Context) error {
	start := time.Now()
	for i := range l.opts.Nodes {
		if c := l.opts.CNI[i]; (c.overlay() || l.overlay() != "") && c != l.overlay() {
			return fmt.Errorf("flannel and Cilium are the whole cluster's CNI: node %d runs %q, node 0 %q", i, c, l.opts.CNI[0])
		}
	}
	var err error
	if l.Fabric, err = l.newNS("fabric"); err != nil {
		return err
	}
	if _, err := l.Fabric.Run("ip", "link", "add", "br0", "type", "bridge"); err != nil {
		return err
	}
	if _, err := l.Fabric.Run("ip", "link", "set", "br0", "up"); err != nil {
		return err
	}
	for i := range l.opts.Nodes {
		n, err := l.addNode(ctx, i)
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		l.Nodes = append(l.Nodes, n)
	}
	switch l.overlay() {
	case Flannel:
		if err := l.startFlannel(ctx); err != nil {
			return err
		}
	case Cilium:
		if err := l.startCilium(ctx); err != nil {
			return err
		}
	default:
		for _, n := range l.Nodes {
			if err := n.routeToPeers(l.Nodes); err != nil {
				return err
			}
		}
	}
	l.logf("lab %s: %d nodes up in %s", l.ID, len(l.Nodes), time.Since(start).Round(time.Millisecond))
	if l.opts.Agents {
		if err := l.StartAgents(ctx); err != nil {
			return err
		}
	}
	return nil
}

// attach connects a member namespace to the fabric bridge; its side of the link is eth0. It
// returns the name of the bridge's port (in the fabric namespace).
func (l *Lab) attach(member *netns.NS, tag string) (string, error) {
	l.mu.Lock()
	l.nsSeq++
	port := fmt.Sprintf("p%d", l.nsSeq)
	l.mu.Unlock()
	if err := netns.Link(l.Fabric, port, member, "eth0"); err != nil {
		return "", fmt.Errorf("attach %s to the fabric: %w", tag, err)
	}
	_, err := l.Fabric.Run("ip", "link", "set", port, "master", "br0")
	return port, err
}

// Close stops agents and servers, deletes every namespace and the lab's files.
func (l *Lab) Close() {
	// Controllers first: one left running outlives its node's namespace (its process keeps it)
	// and goes on deciding for the cluster-scoped objects of the labs that follow.
	for _, n := range l.Nodes {
		if n.Controller != nil {
			n.Controller.Kill()
		}
	}
	for _, n := range l.Nodes {
		if n.Agent != nil {
			n.Agent.Kill()
		}
	}
	l.mu.Lock()
	cleanups := l.cleanups
	l.cleanups = nil
	l.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	removePins(l.ID)
	os.RemoveAll(l.Dir)
}

// makeDir makes a lab's directory with its owner's pid in it, in one step (a rename): a Sweep
// by another test process never sees it without the pid, which would make it sweep a lab being
// made.
func makeDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".new-")
	if err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// Sweep removes what labs of dead processes left behind: namespaces, bpf pins, files.
func Sweep(log io.Writer) {
	entries, _ := os.ReadDir(StateRoot())
	live := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if ownerAlive(e.Name()) {
			live[e.Name()] = true
			continue
		}
		if strings.HasPrefix(e.Name(), ".new-") && !abandoned(e) {
			continue // being made: its pid comes next, or came since ownerAlive read it
		}
		fmt.Fprintf(log, "sweeping leftovers of dead lab %s\n", e.Name())
		os.RemoveAll(filepath.Join(StateRoot(), e.Name()))
		removePins(e.Name())
	}
	names, _ := os.ReadDir("/run/netns")
	for _, n := range names {
		// Looked at again now: a lab started since the listing above (side by side, from
		// another test binary) has made its directory before its namespaces.
		if id, ok := labIDOf(n.Name()); ok && !live[id] && !ownerAlive(id) {
			_ = (&netns.NS{Name: n.Name()}).Delete()
		}
	}
}

// abandoned says whether a directory being made (makeDir) was left by a dead process: its pid
// names one, or it is too old to be in the making. Read afresh: its maker may have written the
// pid since the caller looked.
func abandoned(e os.DirEntry) bool {
	b, err := os.ReadFile(filepath.Join(StateRoot(), e.Name(), "owner.pid"))
	if err != nil {
		info, err := e.Info()
		return err == nil && time.Since(info.ModTime()) > 10*time.Minute
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && !processAlive(pid)
}

// ownerAlive says whether the lab id's directory names a live owner.
func ownerAlive(id string) bool {
	b, err := os.ReadFile(filepath.Join(StateRoot(), id, "owner.pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && processAlive(pid)
}

func labIDOf(nsName string) (string, bool) {
	if !strings.HasPrefix(nsName, "el") {
		return "", false
	}
	id, _, ok := strings.Cut(nsName[2:], "-")
	return id, ok && len(id) == 6
}

func processAlive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// PinRoot is the bpffs directory of the agent on one node of lab id.
func PinRoot(id, node string) string { return fmt.Sprintf("/sys/fs/bpf/egressd-lab-%s-%s", id, node) }

func removePins(id string) {
	dirs, _ := filepath.Glob(fmt.Sprintf("/sys/fs/bpf/egressd-lab-%s-*", id))
	for _, d := range dirs {
		os.RemoveAll(d)
	}
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
