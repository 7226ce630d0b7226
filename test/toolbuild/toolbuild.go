// Package toolbuild builds the programs that the test/tools modules pin, once per content of a
// module, into controlplane.CacheDir().
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
	"syscall"
	"time"

	"github.com/egressd/egressd/test/controlplane"
)

func toolsDir(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "tools", name)
}

// Kubernetes returns the directory of kubelet, kube-scheduler and kube-proxy, built from
// test/tools/node (k8s.io/kubernetes at the control plane's version). One build makes them all:
// the cache key is the module's, so every caller must ask for the same programs.
func Kubernetes(log io.Writer) (string, error) {
	return Cached(log, "node", nil, "k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kube-scheduler", "k8s.io/kubernetes/cmd/kube-proxy")
}

// Cached builds pkgs of the module test/tools/<module> into
// <cache>/<module>/<hash of go.mod, go.sum and sources>, once: concurrent test binaries wait
// for the one that builds.
func Cached(log io.Writer, module string, sources []string, pkgs ...string) (string, error) {
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
