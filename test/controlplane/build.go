package controlplane

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
)

// Binaries are the paths of the control-plane programs.
type Binaries struct {
	Etcd, APIServer, ControllerManager string
}

// toolsDir is test/tools, the module that pins k8s.io/kubernetes and etcd.
func toolsDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "tools")
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

// Build returns the control-plane binaries, building them from test/tools on the first call for
// a given go.mod/go.sum/source (a cold build takes minutes; progress goes to log).
func Build(log io.Writer) (Binaries, error) {
	dir := toolsDir()
	key, err := hashFiles(filepath.Join(dir, "go.mod"), filepath.Join(dir, "go.sum"), filepath.Join(dir, "etcd", "main.go"))
	if err != nil {
		return Binaries{}, fmt.Errorf("hash test/tools: %w", err)
	}
	out := filepath.Join(CacheDir(), "controlplane", key)
	bins := Binaries{
		Etcd:              filepath.Join(out, "etcd"),
		APIServer:         filepath.Join(out, "kube-apiserver"),
		ControllerManager: filepath.Join(out, "kube-controller-manager"),
	}
	if exists(bins.Etcd) && exists(bins.APIServer) && exists(bins.ControllerManager) {
		return bins, nil
	}
	// Test binaries of several packages may get here at once: one builds, the others wait.
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return Binaries{}, err
	}
	lock, err := os.Create(out + ".lock")
	if err != nil {
		return Binaries{}, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return Binaries{}, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	if exists(bins.Etcd) && exists(bins.APIServer) && exists(bins.ControllerManager) {
		return bins, nil
	}
	tmp := out + ".tmp"
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return Binaries{}, err
	}
	fmt.Fprintf(log, "building etcd, kube-apiserver, kube-controller-manager into %s (cold: ~5-10 min)\n", out)
	start := time.Now()
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp+"/",
		"k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager", "./etcd")
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
				fmt.Fprintf(log, "  still building control plane (%s)\n", time.Since(start).Round(time.Second))
			}
		}
	}()
	err = cmd.Run()
	close(done)
	if err != nil {
		return Binaries{}, fmt.Errorf("build control plane in %s: %w", dir, err)
	}
	if err := os.Rename(tmp, out); err != nil && !exists(bins.APIServer) {
		return Binaries{}, err
	}
	os.RemoveAll(tmp)
	fmt.Fprintf(log, "built control plane in %s\n", time.Since(start).Round(time.Second))
	return bins, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func hashFiles(paths ...string) (string, error) {
	h := sha256.New()
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
