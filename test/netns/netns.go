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
	ns, err := Create(fmt.Sprintf("egt%d-%d-%s", os.Getpid(), seq.Add(1), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Delete() })
	return ns
}

// Create creates the namespace name with lo up.
func Create(name string) (*NS, error) {
	ns := &NS{Name: name}
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", name, err, out)
	}
	if _, err := ns.Run("ip", "link", "set", "lo", "up"); err != nil {
		_ = ns.Delete()
		return nil, err
	}
	return ns, nil
}

// Delete removes the namespace (its links go with it).
func (n *NS) Delete() error {
	if out, err := exec.Command("ip", "netns", "del", n.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %v: %s", n.Name, err, out)
	}
	return nil
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
	if err := Link(a, aName, b, bName); err != nil {
		t.Fatal(err)
	}
}

// Link connects a and b with a veth pair named aName (in a) and bName (in b), both up. The pair
// is created in a and b directly, never in the caller's namespace.
func Link(a *NS, aName string, b *NS, bName string) error {
	tmp := fmt.Sprintf("egtv%d-%d", os.Getpid()%100000, seq.Add(1))
	if out, err := exec.Command("ip", "link", "add", tmp, "netns", a.Name, "type", "veth", "peer", "name", bName, "netns", b.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("veth %s/%s: %v: %s", a.Name, b.Name, err, out)
	}
	for _, c := range [][]string{{"ip", "link", "set", tmp, "name", aName}, {"ip", "link", "set", aName, "up"}} {
		if _, err := a.Run(c[0], c[1:]...); err != nil {
			return err
		}
	}
	_, err := b.Run("ip", "link", "set", bName, "up")
	return err
}

// Addr adds addresses to a link; IPv6 ones without duplicate address detection, so that they
// are usable at once.
func (n *NS) Addr(t testing.TB, link string, cidrs ...string) {
	t.Helper()
	if err := n.AddAddrs(link, cidrs...); err != nil {
		t.Fatal(err)
	}
}

// AddAddrs is Addr returning an error.
func (n *NS) AddAddrs(link string, cidrs ...string) error {
	for _, c := range cidrs {
		args := []string{"addr", "add", c, "dev", link}
		if strings.Contains(c, ":") {
			args = append(args, "nodad")
		}
		if _, err := n.Run("ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// Script runs several commands of "ip"/"sysctl"/"nft" style, one per line, stopping at the
// first failure.
func (n *NS) Script(lines ...string) error {
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if _, err := n.Run(f[0], f[1:]...); err != nil {
			return err
		}
	}
	return nil
}
