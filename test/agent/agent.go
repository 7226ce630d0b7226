// Package agent builds the egressd binary and runs it as a real process for end-to-end tests,
// with its log in a file that a failing test prints.
package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/spawn"
	"github.com/egressd/egressd/test/toolbuild"
)

// built holds, per command name, the result of its one build in this process.
var built sync.Map // name -> *build

type build struct {
	once sync.Once
	path string
	err  error
}

// Command returns the path of cmd/<name> of this repository (or of the package <name> when it
// is a path, e.g. test/cnifloor), built once per test process. The
// binaries go to one directory of the build cache (toolbuild.CacheDir()/bin, per race
// setting and checkout), replaced by rename: test processes that run at once each link their own and none
// changes a file another one runs, and repeated runs leave nothing behind in /tmp. With
// EGRESSD_RACE=1 (make test) it is built with the race detector: the agents the tests run then
// report data races (GORACE=halt_on_error=1 makes one fail the test).
func Command(name string) (string, error) {
	v, _ := built.LoadOrStore(name, &build{})
	b := v.(*build)
	b.once.Do(func() { b.path, b.err = buildCommand(name) })
	return b.path, b.err
}

func buildCommand(name string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	// plain: as the image builds them (Dockerfile): static and stripped. A dynamically linked
	// egressd-cni spends a third more CPU starting (the loader), which a CNI ADD pays each time.
	variant, args, env := "plain", []string{"build", "-trimpath", "-ldflags", "-s -w"}, []string{"CGO_ENABLED=0"}
	if os.Getenv("EGRESSD_RACE") == "1" {
		variant, args, env = "race", []string{"build", "-race"}, nil // the race detector needs cgo
	}
	// Per checkout: test processes of two worktrees at once (a helper's beside one's own) each
	// run their own sources' agent, not whichever linked last.
	root := filepath.Join(filepath.Dir(file), "..", "..")
	tree := sha256.Sum256([]byte(filepath.Clean(root)))
	dir := filepath.Join(toolbuild.CacheDir(), "bin", variant, hex.EncodeToString(tree[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	pkg := "./cmd/" + name
	if strings.Contains(name, "/") {
		pkg = "./" + name
	}
	bin := filepath.Join(dir, filepath.Base(name))
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	cmd := exec.Command("go", append(args, "-o", tmp, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return bin, nil
}

// Options of one agent process.
type Options struct {
	// Binary is the egressd to run.
	Binary string
	// LogDir receives <node>.log.
	LogDir     string
	Node       string
	Kubeconfig string
	// Args are extra flags.
	Args []string
	// Wrap runs the agent through another command (e.g. nsenter into a node's netns).
	Wrap []string
	// PinRoot is --bpf-pin-root (default /sys/fs/bpf/egressd-test-<node>).
	PinRoot string
	// Dial reaches the agent's HTTP endpoints (default: a plain dial, for an agent in the
	// caller's namespace).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Process is a running egressd.
type Process struct {
	Node        string
	MetricsAddr string
	HealthAddr  string
	// ProfilingAddr serves the runtime profiles when the process runs with --profiling.
	ProfilingAddr string
	LogPath       string
	cmd           *exec.Cmd
	done          chan struct{}
	http          *http.Client
	pinRoot       string
}

// Start runs egressd for a test (see Launch); the process is stopped, and its log printed if the
// test failed, when the test ends.
func Start(t testing.TB, o Options) *Process {
	t.Helper()
	bin, err := Command("egressd")
	if err != nil {
		t.Fatal(err)
	}
	o.Binary = bin
	o.LogDir = t.TempDir()
	p, err := Launch(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		os.RemoveAll(p.pinRoot)
		if t.Failed() {
			t.Logf("egressd %s log:\n%s", o.Node, p.Log())
		}
	})
	return p
}

// Launch runs an egressd agent on free loopback ports. It dies with the calling process.
func Launch(o Options) (*Process, error) {
	if o.PinRoot == "" {
		o.PinRoot = "/sys/fs/bpf/egressd-test-" + o.Node
	}
	return launch(o.Node, o.LogDir, o.Wrap, o.Dial, func(p *Process) []string {
		p.pinRoot = o.PinRoot
		args := append([]string{o.Binary,
			"--node-name", o.Node,
			"--kubeconfig", o.Kubeconfig,
			"--metrics-bind-address", p.MetricsAddr,
			"--health-probe-bind-address", p.HealthAddr,
			"--profiling-bind-address", p.ProfilingAddr,
			"--bpf-pin-root", o.PinRoot,
			"--log-format", "text",
			// Tests scrape without a token (the guard has its own tests).
			"--metrics-auth=false",
			// Its own CNI socket (o.Args may set another): agents of a test share the filesystem.
			"--cni-socket", shortSocket(o.LogDir, o.Node),
		}, o.Args...)
		if len(o.Wrap) == 0 {
			// Agents sharing the test's network namespace must not compete for the health port;
			// the lab's agents each have their node's namespace and serve it as in production.
			args = append(args, "--egress-health-bind-address", "127.0.0.1:0")
		}
		return args
	})
}

// ControllerOptions of one egressd controller process.
type ControllerOptions struct {
	// Binary is the egressd to run (as egressd controller).
	Binary string
	// Name is the replica's identity in the Lease and names its log, <name>.log in LogDir.
	Name       string
	LogDir     string
	Kubeconfig string
	// LeaderNamespace holds the Lease.
	LeaderNamespace string
	// Args are extra flags (later ones win: they may set other lease timers).
	Args []string
	// Wrap runs it through another command (e.g. nsenter into a node's netns).
	Wrap []string
	// Dial reaches its HTTP endpoints (default: a plain dial).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// LaunchController runs egressd controller on free loopback ports, with lease timers that
// hold on a loaded test machine (3 s; the shipped 1 s is what the failover tests set). It
// dies with the calling process.
func LaunchController(o ControllerOptions) (*Process, error) {
	return launch(o.Name, o.LogDir, o.Wrap, o.Dial, func(p *Process) []string {
		return append([]string{o.Binary, "controller",
			"--identity", o.Name,
			"--kubeconfig", o.Kubeconfig,
			"--leader-election-namespace", o.LeaderNamespace,
			"--metrics-bind-address", p.MetricsAddr,
			"--health-probe-bind-address", p.HealthAddr,
			"--profiling-bind-address", p.ProfilingAddr,
			"--leader-election-lease-duration", "3s",
			"--leader-election-renew-deadline", "2s",
			"--leader-election-retry-period", "250ms",
			"--log-format", "text",
			"--metrics-auth=false",
		}, o.Args...)
	})
}

// StartController runs egressd controller for a test (see LaunchController): stopped, and its
// log printed if the test failed, when the test ends.
func StartController(t testing.TB, o ControllerOptions) *Process {
	t.Helper()
	bin, err := Command("egressd")
	if err != nil {
		t.Fatal(err)
	}
	o.Binary, o.LogDir = bin, t.TempDir()
	p, err := LaunchController(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("egressd controller %s log:\n%s", o.Name, p.Log())
		}
	})
	return p
}

// launch starts the command args returns for the process (whose addresses it fills in), with
// its output in <name>.log.
func launch(name, logDir string, wrap []string, dial func(ctx context.Context, network, addr string) (net.Conn, error), args func(*Process) []string) (*Process, error) {
	ports, err := controlplane.FreePorts(3)
	if err != nil {
		return nil, err
	}
	p := &Process{
		Node:          name,
		MetricsAddr:   fmt.Sprintf("127.0.0.1:%d", ports[0]),
		HealthAddr:    fmt.Sprintf("127.0.0.1:%d", ports[1]),
		ProfilingAddr: fmt.Sprintf("127.0.0.1:%d", ports[2]),
		LogPath:       filepath.Join(logDir, name+".log"),
		done:          make(chan struct{}),
		// Uncompressed: the tests and the scale harness scrape an agent on this machine many
		// times a second, and gzip was the agent's cost, not the network's.
		http: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableCompression: true}},
	}
	if dial != nil {
		p.http.Transport = &http.Transport{DialContext: dial, DisableKeepAlives: true, DisableCompression: true}
	}
	argv := append(append([]string{}, wrap...), args(p)...)
	logf, err := os.Create(p.LogPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := spawn.Start(p.cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start egressd %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

// shortSocket is a socket path unique to a log directory and node that fits in sun_path.
func shortSocket(dir, node string) string {
	h := sha256.Sum256([]byte(dir + "\x00" + node))
	return filepath.Join(os.TempDir(), fmt.Sprintf("egressd-cni-%x.sock", h[:8]))
}

// Log returns the agent's log so far.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// Pid of the process (of the wrapper, when Wrap is used: nsenter execs the agent in place).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.done }

// ExitCode is the exit code after Exited.
func (p *Process) ExitCode() int { return p.cmd.ProcessState.ExitCode() }

// Terminate sends SIGTERM and waits up to timeout for the exit, returning how long it took.
func (p *Process) Terminate(timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, err
	}
	select {
	case <-p.done:
		return time.Since(start), nil
	case <-time.After(timeout):
		return time.Since(start), fmt.Errorf("egressd %s still running %s after SIGTERM", p.Node, timeout)
	}
}

// Kill stops the process at once, as a crash or OOM kill would.
func (p *Process) Kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Get fetches path from the health (or metrics, for /metrics) endpoint: status code and body.
func (p *Process) Get(path string) (int, string, error) {
	addr := p.HealthAddr
	if path == "/metrics" {
		addr = p.MetricsAddr
	}
	resp, err := p.http.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Profile fetches one of the runtime profiles (pprof: "heap", "profile?seconds=10", ...); the
// process must run with --profiling.
func (p *Process) Profile(name string, timeout time.Duration) ([]byte, error) {
	c := &http.Client{Transport: p.http.Transport, Timeout: timeout}
	resp, err := c.Get(fmt.Sprintf("http://%s/debug/pprof/%s", p.ProfilingAddr, name))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("profile %s of egressd %s: %s: %s", name, p.Node, resp.Status, b)
	}
	return b, err
}

// WaitReady waits until /readyz answers 200.
func (p *Process) WaitReady(ctx context.Context) error {
	for {
		if code, _, err := p.Get("/readyz"); err == nil && code == http.StatusOK {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("egressd %s exited before ready", p.Node)
		case <-ctx.Done():
			return fmt.Errorf("egressd %s not ready: %w", p.Node, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Metric returns the value of an unlabelled sample in /metrics, or "" if absent.
func (p *Process) Metric(name string) (string, error) {
	_, body, err := p.Get("/metrics")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(body, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			return f[1], nil
		}
	}
	return "", nil
}

// Sample returns the value of the sample whose name and labels (as exposed, labels sorted:
// `name{a="x",b="y"}`) are given, or "" if absent.
func (p *Process) Sample(series string) (string, error) {
	_, body, err := p.Get("/metrics")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v, nil
		}
	}
	return "", nil
}

// HasMetric reports whether any sample of family name is exposed.
func (p *Process) HasMetric(name string) (bool, error) {
	_, body, err := p.Get("/metrics")
	return bytes.Contains([]byte(body), []byte("\n"+name)), err
}
