// Package toolbuild builds the programs that the test/tools modules pin, once per content of a
// module, into CacheDir().
package toolbuild

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

func toolsDir(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "tools", name)
}

// CacheDir is where built binaries are kept between runs: $EGRESSD_CACHE or ~/.cache/egressd.
func CacheDir() string {
	if d := os.Getenv("EGRESSD_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "egressd")
	}
	return filepath.Join(os.TempDir(), "egressd-cache")
}

// ControlPlane returns the directory of etcd, kube-apiserver and kube-controller-manager, built
// from test/tools itself (k8s.io/kubernetes and etcd's server).
func ControlPlane(log io.Writer) (string, error) {
	return build(log, "controlplane", toolsDir(""), []string{"etcd/main.go"}, false,
		"k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager", "./etcd")
}

// Kubernetes returns the directory of kubelet, kube-scheduler and kube-proxy, built from
// test/tools/node (k8s.io/kubernetes at the control plane's version). One build makes them all:
// the cache key is the module's, so every caller must ask for the same programs.
func Kubernetes(log io.Writer) (string, error) {
	return Cached(log, "node", nil, "k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kube-scheduler", "k8s.io/kubernetes/cmd/kube-proxy")
}

// Flannel returns the directory of flanneld (the binary is named flannel), built from
// test/tools/flannel.
func Flannel(log io.Writer) (string, error) {
	// With cgo, as flannel's releases: its udp backend's proxy is C.
	return build(log, "flannel", toolsDir("flannel"), []string{"tencentvpc/go.mod", "tencentvpc/v20170312/vpc.go"}, true, "github.com/flannel-io/flannel")
}

// Cilium returns the directory of cilium-agent (named daemon, after its package) and
// cilium-cni, built from test/tools/cilium, and the directory of Cilium's module source: the
// agent compiles its BPF programs from there at start, and the lab installs its CRDs.
func Cilium(log io.Writer) (bin, src string, err error) {
	dir := toolsDir("cilium")
	if bin, err = Cached(log, "cilium", nil, "github.com/cilium/cilium/daemon", "github.com/cilium/cilium/plugins/cilium-cni"); err != nil {
		return "", "", err
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cilium/cilium")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("Cilium's module source: %w", err)
	}
	return bin, strings.TrimSpace(string(out)), nil
}

// Cached builds pkgs of the module test/tools/<module> into
// <cache>/<module>/<hash of go.mod, go.sum and sources>, once: concurrent test binaries wait
// for the one that builds.
func Cached(log io.Writer, module string, sources []string, pkgs ...string) (string, error) {
	return build(log, module, toolsDir(module), sources, false, pkgs...)
}

// build builds pkgs of the module in dir into <cache>/<name>/<hash of go.mod, go.sum and
// sources>, static unless cgo.
func build(log io.Writer, name, dir string, sources []string, cgo bool, pkgs ...string) (string, error) {
	h := sha256.New()
	for _, f := range append([]string{"go.mod", "go.sum"}, sources...) {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return "", fmt.Errorf("hash %s: %w", name, err)
		}
		h.Write(b)
	}
	out := filepath.Join(CacheDir(), name, hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	lock, err := os.Create(out + ".lock")
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	tmp := out + ".tmp"
	_ = os.RemoveAll(tmp)
	fmt.Fprintf(log, "building %v from %s into %s (cold: minutes)\n", pkgs, name, out)
	start := time.Now()
	// Static binaries; containerd's btrfs and devmapper snapshotters need cgo and are not used.
	cmd := exec.Command("go", append([]string{"build", "-trimpath", "-tags", "no_btrfs no_devmapper", "-o", tmp + "/"}, pkgs...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if cgo {
		cmd.Env[len(cmd.Env)-1] = "CGO_ENABLED=1"
	}
	cmd.Stdout, cmd.Stderr = log, log
	done := make(chan struct{})
	go func() { // a cold build is silent for minutes: show it is alive
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(log, "  still building %s (%s)\n", name, time.Since(start).Round(time.Second))
			}
		}
	}()
	err = cmd.Run()
	close(done)
	if err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	fmt.Fprintf(log, "built %s in %s\n", name, time.Since(start).Round(time.Second))
	return out, nil
}
