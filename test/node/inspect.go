package node

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// hostDefaults are the machine's paths that the kubelet, containerd, runc and CNI plugins use
// unless told otherwise: the node must leave them as it found them.
var hostDefaults = []string{"/var/lib/kubelet", "/var/lib/containerd", "/var/lib/cni", "/var/log/pods",
	"/var/log/containers", "/run/containerd", "/run/runc", "/run/egressd", "/etc/cni", "/opt/cni", "/etc/containerd",
	"/sys/fs/bpf/egressd", "/etc/kubernetes"}

// nsIno is the inode of a namespace file (0 if unreadable).
func nsIno(path string) uint64 {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

// Leftovers lists what remains of the node on the machine: processes in its mount namespace
// or cgroups, cgroup directories, paths the node's programs use by default that did not exist
// before. Empty after Close.
func (n *Node) Leftovers() []string {
	var out []string
	for _, p := range hostDefaults {
		if _, err := os.Lstat(p); err == nil && !n.hostPathsBefore[p] {
			out = append(out, "path "+p)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/mnt")
	for _, p := range procs {
		if n.mountNSIno != 0 && nsIno(p) == n.mountNSIno {
			out = append(out, "process "+strings.Split(p, "/")[2]+" in the node's mount namespace")
		}
	}
	hs, err := hierarchies()
	if err != nil {
		return append(out, err.Error())
	}
	for _, p := range cgroupPids(hs, n.Cgroup) {
		out = append(out, fmt.Sprintf("process %d in cgroup %s", p, n.Cgroup))
	}
	for _, h := range hs {
		if _, err := os.Stat(filepath.Join(h, n.Cgroup)); err == nil {
			out = append(out, "cgroup "+filepath.Join(h, n.Cgroup))
		}
	}
	return out
}

// mountNS is the node's mount namespace (containerd's).
func (n *Node) mountNS() string { return fmt.Sprintf("/proc/%d/ns/mnt", n.containerd.cmd.Process.Pid) }

// RootPath is a path of the node's filesystem as seen from the machine (e.g. /sys/fs/bpf/x).
func (n *Node) RootPath(p string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", n.containerd.cmd.Process.Pid), p)
}

// Command runs a program inside the node: its network and mount namespaces (as a hostNetwork
// pod with the node's paths sees them).
func (n *Node) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + n.ln.NS.Path(), "--mount=" + n.mountNS(), name}, args...)...)
}

// LogTail returns the last lines of a daemon's log (containerd, kubelet).
func (n *Node) LogTail(name string, lines int) string {
	b, _ := os.ReadFile(n.path(name + ".log"))
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// Processes returns the pids of the node's processes (containers included) named comm.
func (n *Node) Processes(comm string) []int {
	hs, err := hierarchies()
	if err != nil {
		return nil
	}
	var out []int
	for _, p := range cgroupPids(hs, n.Cgroup) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		if err == nil && strings.TrimSpace(string(b)) == comm {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// ContainerLog returns what a container of a pod on the node wrote (its current instance),
// from the CRI log files the kubelet keeps, without the CRI's line prefixes.
func (n *Node) ContainerLog(namespace, pod, container string) (string, error) {
	files, _ := filepath.Glob(n.path("pod-logs", namespace+"_"+pod+"_*", container, "*.log"))
	if len(files) == 0 {
		return "", fmt.Errorf("no log of container %s of pod %s/%s on %s", container, namespace, pod, n.Name)
	}
	slices.Sort(files)
	b, err := os.ReadFile(files[len(files)-1])
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		// <time> <stream> <P|F> <content>
		if f := strings.SplitN(line, " ", 4); len(f) == 4 {
			out.WriteString(f[3])
			if f[2] == "F" {
				out.WriteByte('\n')
			}
		}
	}
	return out.String(), nil
}
