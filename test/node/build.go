package node

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/egressd/egressd/test/controlplane"
)

// Binaries are the programs of a real node.
type Binaries struct {
	// Kubelet and Scheduler come from test/tools/node (k8s.io/kubernetes at the control plane's
	// version); the scheduler runs in the control plane (controlplane.Options.Scheduler).
	Kubelet, Scheduler string
	// Containerd, its runc shim and OCIImage (image archives, imports) come from
	// test/tools/containerd. runc is Debian's (hack/install-deps.sh installs it); Start finds it.
	Containerd, Shim, OCIImage string
}

func toolsDir(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "tools", name)
}

// Build returns the node's binaries, building each module's on the first call for its go.mod,
// go.sum and sources into controlplane.CacheDir() (cold: minutes; progress goes to log).
func Build(log io.Writer) (Binaries, error) {
	k8s, err := cachedBuild(log, "node", nil, "k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kube-scheduler")
	if err != nil {
		return Binaries{}, err
	}
	ctrd, err := buildContainerd(log)
	if err != nil {
		return Binaries{}, err
	}
	return Binaries{
		Kubelet: filepath.Join(k8s, "kubelet"), Scheduler: filepath.Join(k8s, "kube-scheduler"),
		Containerd: filepath.Join(ctrd, "containerd"), Shim: filepath.Join(ctrd, "containerd-shim-runc-v2"),
		OCIImage: filepath.Join(ctrd, "ociimage"),
	}, nil
}

// OCIImage returns the image tool (test/tools/containerd/ociimage), building test/tools/containerd
// if needed, without the kubelet (make image-archive).
func OCIImage(log io.Writer) (string, error) {
	dir, err := buildContainerd(log)
	return filepath.Join(dir, "ociimage"), err
}

func buildContainerd(log io.Writer) (string, error) {
	return cachedBuild(log, "containerd", []string{"ociimage/main.go"},
		"github.com/containerd/containerd/v2/cmd/containerd",
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
		"./ociimage")
}

// cachedBuild builds pkgs of the module test/tools/<module> into
// <cache>/<module>/<hash of go.mod, go.sum and sources>, once: concurrent test binaries wait
// for the one that builds.
func cachedBuild(log io.Writer, module string, sources []string, pkgs ...string) (string, error) {
	dir := toolsDir(module)
	h := sha256.New()
	for _, f := range append([]string{"go.mod", "go.sum"}, sources...) {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return "", fmt.Errorf("hash test/tools/%s: %w", module, err)
		}
		h.Write(b)
	}
	out := filepath.Join(controlplane.CacheDir(), module, hex.EncodeToString(h.Sum(nil))[:16])
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
	fmt.Fprintf(log, "building %v from test/tools/%s into %s (cold: minutes)\n", pkgs, module, out)
	start := time.Now()
	// Static binaries; containerd's btrfs and devmapper snapshotters need cgo and are not used.
	cmd := exec.Command("go", append([]string{"build", "-trimpath", "-tags", "no_btrfs no_devmapper", "-o", tmp + "/"}, pkgs...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
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
				fmt.Fprintf(log, "  still building test/tools/%s (%s)\n", module, time.Since(start).Round(time.Second))
			}
		}
	}()
	err = cmd.Run()
	close(done)
	if err != nil {
		return "", fmt.Errorf("build test/tools/%s: %w", module, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	fmt.Fprintf(log, "built test/tools/%s in %s\n", module, time.Since(start).Round(time.Second))
	return out, nil
}
