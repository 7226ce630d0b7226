package controlplane

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stop kills every component and removes the control plane's directory.
func (cp *ControlPlane) Stop() {
	cp.kill()
	os.RemoveAll(cp.Dir)
}

// SaveEtcd stops the control plane and moves etcd's data to dst (which must not exist), for
// Options.EtcdData of later ones; the rest of its directory is removed.
func (cp *ControlPlane) SaveEtcd(dst string) error {
	cp.kill() // etcd stops on SIGTERM, its data consistent
	defer os.RemoveAll(cp.Dir)
	if err := os.Rename(cp.path("etcd-data"), dst); err == nil {
		return nil
	}
	if out, err := exec.Command("cp", "-a", cp.path("etcd-data"), dst).CombinedOutput(); err != nil {
		return fmt.Errorf("save etcd data to %s: %v: %s", dst, err, out)
	}
	return nil
}

// kill stops the components, the last started first, each with SIGTERM and after 5 s SIGKILL.
func (cp *ControlPlane) kill() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		_ = syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	cp.procs = nil
}

// StopDir stops the control plane whose state is in dir (started detached by another process).
func StopDir(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, pidsFile)); err != nil {
		return fmt.Errorf("no control plane in %s: %w", dir, err)
	}
	killRecorded(dir)
	return os.RemoveAll(dir)
}

// Sweep removes what crashed or killed runs left under root: the components of a run whose
// owner process is gone are killed and its directory deleted.
func Sweep(root string, log io.Writer) {
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil && perr == nil && alive(pid) {
			continue
		}
		if err != nil && time.Since(modTime(dir)) < time.Minute {
			continue // a run that is still being set up
		}
		fmt.Fprintf(log, "sweeping leftovers of dead control plane %s\n", dir)
		killRecorded(dir)
		os.RemoveAll(dir)
	}
}

func killRecorded(dir string) {
	b, _ := os.ReadFile(filepath.Join(dir, pidsFile))
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

func modTime(p string) time.Time {
	st, err := os.Stat(p)
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	// A zombie is dead for our purposes.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(fields) == 0 || fields[0] != "Z"
}
