// Package netns creates throw-away network namespaces for privileged tests, with names unique
// to the test run so that parallel runs and other users of the machine are never disturbed.
package netns

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netns"
)

// NS is a named network namespace (/run/netns/<Name>).
type NS struct {
	Name string
}

var seq atomic.Uint32

// New creates a namespace named egt<pid>-<n>-<name> with lo up; it is deleted when the test ends.
func New(t testing.TB, name string) *NS {
	t.Helper()
	ns := &NS{Name: fmt.Sprintf("egt%d-%d-%s", os.Getpid(), seq.Add(1), name)}
	if out, err := exec.Command("ip", "netns", "add", ns.Name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns.Name, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns.Name).Run() })
	ns.MustRun(t, "ip", "link", "set", "lo", "up")
	return ns
}

// Path of the namespace handle.
func (n *NS) Path() string { return "/run/netns/" + n.Name }

// Command builds a command that runs inside the namespace. nsenter (not ip netns exec) keeps
// /sys, and so bpffs, visible.
func (n *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + n.Path(), name}, args...)...)
}

// Run runs a command inside the namespace and returns its combined output.
func (n *NS) Run(name string, args ...string) (string, error) {
	out, err := n.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), n.Name, err, out)
	}
	return string(out), nil
}

// MustRun is Run that fails the test on error.
func (n *NS) MustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := n.Run(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Do runs f on a thread inside the namespace. Sockets f opens belong to the namespace for
// their whole life; goroutines f starts do not run in it.
func (n *NS) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is discarded with the goroutine
		h, err := netns.GetFromPath(n.Path())
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

// Veth connects a and b with a veth pair named aName (in a) and bName (in b), both up.
func Veth(t testing.TB, a *NS, aName string, b *NS, bName string) {
	t.Helper()
	tmp := fmt.Sprintf("egtv%d", seq.Add(1))
	if out, err := exec.Command("ip", "link", "add", tmp, "netns", a.Name, "type", "veth", "peer", "name", bName, "netns", b.Name).CombinedOutput(); err != nil {
		t.Fatalf("veth %s/%s: %v: %s", a.Name, b.Name, err, out)
	}
	a.MustRun(t, "ip", "link", "set", tmp, "name", aName)
	a.MustRun(t, "ip", "link", "set", aName, "up")
	b.MustRun(t, "ip", "link", "set", bName, "up")
}

// Addr adds addresses to a link; IPv6 ones without duplicate address detection, so that they
// are usable at once.
func (n *NS) Addr(t testing.TB, link string, cidrs ...string) {
	t.Helper()
	for _, c := range cidrs {
		args := []string{"addr", "add", c, "dev", link}
		if strings.Contains(c, ":") {
			args = append(args, "nodad")
		}
		n.MustRun(t, "ip", args...)
	}
}
