package node

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/egressd/egressd/test/lab"
)

// hierarchies are the mounted cgroup hierarchies (v1 controllers, named ones, the unified
// one), by mount point.
func hierarchies() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		i := slices.Index(fields, "-")
		if i < 0 || i+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if fs := fields[i+1]; fs == "cgroup" || fs == "cgroup2" {
			out = append(out, fields[4])
		}
	}
	return out, s.Err()
}

// createCgroup creates <h>/<name>/runtime in every hierarchy (cpuset ones with their parent's
// CPUs and memory nodes, without which no process may join).
func createCgroup(name string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		for _, d := range []string{filepath.Join(h, name), filepath.Join(h, name, "runtime")} {
			if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
				return fmt.Errorf("create cgroup %s: %w", d, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if b, err := os.ReadFile(filepath.Join(filepath.Dir(d), f)); err == nil {
					if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
						return fmt.Errorf("cgroup %s: %s: %w", d, f, err)
					}
				}
			}
		}
	}
	return nil
}

// joinCgroup is a shell line moving the shell into <h>/<path> of every hierarchy.
func joinCgroup(path string) string {
	hs, _ := hierarchies()
	var lines []string
	for _, h := range hs {
		lines = append(lines, fmt.Sprintf("echo $$ > %s", filepath.Join(h, path, "cgroup.procs")))
	}
	return strings.Join(lines, "\n")
}

// removeCgroup kills every process of the subtree name, until none is left, and removes its
// cgroups, deepest first, in every hierarchy.
func removeCgroup(name string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		pids := cgroupPids(hs, name)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes %v survive SIGKILL", name, pids)
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var errs []error
	for _, h := range hs {
		root := filepath.Join(h, name)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := retryRmdir(dirs[i]); err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// retryRmdir removes a cgroup; a cgroup whose last process just died may be busy a moment.
func retryRmdir(d string) error {
	var err error
	for range 50 {
		if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

func cgroupPids(hs []string, name string) []int {
	seen := map[int]bool{}
	for _, h := range hs {
		_ = filepath.WalkDir(filepath.Join(h, name), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	var out []int
	for p := range seen {
		out = append(out, p)
	}
	return out
}

// Sweep kills and removes the nodes of labs whose process is gone (a killed test run).
func Sweep(log io.Writer) {
	hs, err := hierarchies()
	if err != nil || len(hs) == 0 {
		return
	}
	seen := map[string]bool{}
	for _, h := range hs {
		dirs, _ := filepath.Glob(filepath.Join(h, "egressd-node-*"))
		for _, d := range dirs {
			seen[filepath.Base(d)] = true
		}
	}
	for name := range seen {
		id, _, _ := strings.Cut(strings.TrimPrefix(name, "egressd-node-"), "-")
		b, err := os.ReadFile(filepath.Join(lab.StateRoot(), id, "owner.pid"))
		if err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && syscall.Kill(pid, 0) == nil {
				continue
			}
		}
		fmt.Fprintf(log, "sweeping real node %s of a dead lab\n", name)
		if err := removeCgroup(name); err != nil {
			fmt.Fprintf(log, "sweep %s: %v\n", name, err)
		}
	}
}
