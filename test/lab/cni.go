package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
	"github.com/egressd/egressd/test/agent"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/toolbuild"
)

// The lab's pods get their interfaces as a container runtime gives them: libcni runs a conflist
// on the node, the reference plugins (ptp on routed nodes, bridge on bridged ones, host-local
// IPAM) and, on a node where egressd was started (the DaemonSet installs its plugin), egressd's
// chained plugin after them.

// CNIVersion is the spec version of the lab's conflists.
const CNIVersion = "1.1.0"

// cniTimeout is egressd-cni's timeout in the lab unless a pod sets one.
const cniTimeout = 10 * time.Second

var (
	pluginsOnce sync.Once
	pluginsDir  string
	pluginsErr  error
)

// cniPluginsModule is test/tools/cniplugins, the module that pins the reference plugins.
func cniPluginsModule() string { return filepath.Join(repoRoot(), "test", "tools", "cniplugins") }

// ReferencePlugins returns the directory of the CNI reference plugins (ptp, bridge, host-local),
// building them from test/tools/cniplugins into the cache on the first call for its go.mod and
// go.sum (~20 s cold).
func ReferencePlugins(log io.Writer) (string, error) {
	pluginsOnce.Do(func() { pluginsDir, pluginsErr = buildPlugins(log) })
	return pluginsDir, pluginsErr
}

func buildPlugins(log io.Writer) (string, error) {
	mod := cniPluginsModule()
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(mod, f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	out := filepath.Join(toolbuild.CacheDir(), "cniplugins", hex.EncodeToString(h.Sum(nil))[:16])
	names := []string{"ptp", "bridge", "host-local"}
	have := func() bool {
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(out, n)); err != nil {
				return false
			}
		}
		return true
	}
	if have() {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	lock, err := os.Create(out + ".lock") // test binaries of several packages may get here at once
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if have() {
		return out, nil
	}
	tmp := out + ".tmp"
	_ = os.RemoveAll(tmp)
	fmt.Fprintf(log, "building the CNI reference plugins into %s\n", out)
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp+"/",
		"github.com/containernetworking/plugins/plugins/main/ptp",
		"github.com/containernetworking/plugins/plugins/main/bridge",
		"github.com/containernetworking/plugins/plugins/ipam/host-local")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build CNI reference plugins: %v\n%s", err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	return out, nil
}

// builtPlugin returns the directory holding a plugin of this tree (agent.Command's name).
func builtPlugin(name string) (string, error) {
	bin, err := agent.Command(name)
	return filepath.Dir(bin), err
}

// egressdCNI is the built egressd-cni, with the helper it runs for router pods beside it.
func egressdCNI() (string, error) {
	if _, err := agent.Command(cniapi.RouterHelper); err != nil {
		return "", err
	}
	return agent.Command("egressd-cni")
}

// CNISocket is the socket of the node's egressd (--cni-socket), in a directory of the node's:
// every node's agent shares the machine's filesystem, and the agent keeps its state files
// (dnsnames.json, rp_filter.json, ...) next to its socket.
func (n *Node) CNISocket() string { return filepath.Join(n.lab.Dir, n.Name, "run", "cni.sock") }

// conflist is the node's network configuration list: the primary plugin for its shape, then
// egressd-cni when egressd runs on the node.
func (n *Node) conflist(o PodOptions) (*libcni.NetworkConfigList, error) {
	if n.lab.opts.InstallCNI {
		files, err := libcni.ConfFiles(n.CNIConfDir(), []string{".conf", ".conflist"})
		if err != nil || len(files) == 0 {
			return nil, fmt.Errorf("no CNI configuration in %s: %v", n.CNIConfDir(), err)
		}
		return libcni.ConfListFromFile(files[0])
	}
	return n.conflistBuilt(o)
}

// conflistBuilt is the node's list as the lab writes it.
func (n *Node) conflistBuilt(o PodOptions) (*libcni.NetworkConfigList, error) {
	ipam := map[string]any{
		"type":    "host-local",
		"dataDir": filepath.Join(n.lab.Dir, "ipam"),
		"ranges": [][]map[string]string{
			{{"subnet": n.PodV4.String(), "gateway": gateway(n.PodV4).String()}},
			{{"subnet": n.PodV6.String(), "gateway": gateway(n.PodV6).String()}},
		},
	}
	var primary map[string]any
	switch n.CNI {
	case Bridged:
		primary = map[string]any{"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true,
			"ipMasq": false, "ipam": ipam}
	case Flannel:
		var err error
		if primary, err = n.flannelPrimary(ipam["dataDir"].(string)); err != nil {
			return nil, err
		}
	case Cilium:
		primary = n.ciliumPrimary()
	default:
		ipam["routes"] = []map[string]string{{"dst": "0.0.0.0/0"}, {"dst": "::/0"}}
		primary = map[string]any{"type": "ptp", "ipMasq": false, "ipam": ipam}
	}
	plugins := []map[string]any{primary}
	if o.CNIFloor {
		plugins = append(plugins, map[string]any{"type": "cnifloor"})
	} else if n.agentStarted.Load() && !o.WithoutEgressdCNI && !o.primaryOnly {
		timeout := cniTimeout
		if o.CNITimeout > 0 {
			timeout = o.CNITimeout
		}
		plugins = append(plugins, map[string]any{"type": "egressd-cni", "socket": n.CNISocket(),
			"timeout": timeout.String(), "failOpen": o.CNIFailOpen})
	}
	b, err := json.Marshal(map[string]any{"cniVersion": CNIVersion, "name": "lab", "plugins": plugins})
	if err != nil {
		return nil, err
	}
	return libcni.ConfListFromBytes(b)
}

// cniConfig is libcni with the lab's plugin directories, running plugins inside the node's
// namespace (the runtime's host namespace) and timing each.
func (n *Node) cniConfig(times map[string]time.Duration, floor bool) (*libcni.CNIConfig, error) {
	plugins, err := ReferencePlugins(n.lab.opts.Log)
	if err != nil {
		return nil, err
	}
	dirs := []string{plugins}
	if n.CNI == Cilium {
		dirs = append(dirs, filepath.Join(n.ciliumDir(), "cni"))
	}
	if n.lab.opts.InstallCNI {
		dirs = append(dirs, n.CNIBinDir()) // what the agent installed, and only that
	} else if n.agentStarted.Load() {
		plugin, err := egressdCNI()
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, filepath.Dir(plugin))
	}
	if floor {
		d, err := builtPlugin("test/cnifloor")
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, d)
	}
	ex := &nodeExec{RawExec: &invoke.RawExec{Stderr: io.Discard}, ns: n.NS, times: times}
	return libcni.NewCNIConfigWithCacheDir(dirs, n.CNICacheDir(), ex), nil
}

// nodeExec runs a plugin on a thread inside the node's namespace (the child inherits it), and
// records how long each plugin ran, by "<plugin> <command>".
type nodeExec struct {
	*invoke.RawExec
	version.PluginDecoder
	ns    *netns.NS
	mu    sync.Mutex
	times map[string]time.Duration
}

func (e *nodeExec) ExecPlugin(ctx context.Context, path string, stdin []byte, environ []string) ([]byte, error) {
	var out []byte
	start := time.Now()
	err := e.ns.Do(func() error {
		var err error
		out, err = e.RawExec.ExecPlugin(ctx, path, stdin, environ)
		return err
	})
	if e.times != nil {
		cmd := ""
		for _, kv := range environ {
			if v, ok := strings.CutPrefix(kv, "CNI_COMMAND="); ok {
				cmd = v
			}
		}
		e.mu.Lock()
		e.times[filepath.Base(path)+" "+cmd] += time.Since(start)
		e.mu.Unlock()
	}
	return out, err
}

// CNICacheDir is the node's libcni cache, where its runtime keeps each sandbox's result (the
// agent's --cni-cache-dir).
func (n *Node) CNICacheDir() string { return filepath.Join(n.lab.Dir, n.Name, "cni-cache") }

// CNIConfDir and CNIBinDir are the node's CNI directories when the agents install egressd-cni
// (Options.InstallCNI).
func (n *Node) CNIConfDir() string { return filepath.Join(n.lab.Dir, n.Name, "net.d") }

func (n *Node) CNIBinDir() string { return filepath.Join(n.lab.Dir, n.Name, "cnibin") }

// WritePrimaryCNI writes the node's primary plugin's configuration list, as a CNI's own
// installer does (at start, and again when it restarts or upgrades), and creates the plugin
// directory.
func (n *Node) WritePrimaryCNI() error {
	l, err := n.conflistBuilt(PodOptions{primaryOnly: true})
	if err != nil {
		return err
	}
	for _, d := range []string{n.CNIConfDir(), n.CNIBinDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(n.CNIConfDir(), "10-lab.conflist"), l.Bytes, 0o644)
}
