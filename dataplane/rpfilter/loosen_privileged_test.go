package rpfilter

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedLoosener, in a namespace whose filter is strict (all 1) and with /proc/sys
// read-only as in the agent's container: the wanted interfaces that are strict are loosened and
// remembered in the file; a loosener opened from the file (a restarted agent) puts back those
// no longer wanted; Restore (egressctl cleanup) puts back the rest and removes the file; a
// value someone changed after egressd loosened it is theirs, and stays.
func TestPrivilegedLoosener(t *testing.T) {
	privileged.Require(t)
	ns := netns.New(t, "rpf")
	if err := ns.Script("sysctl -qw net.ipv4.conf.all.rp_filter=1",
		"ip link add name a type veth peer name pa", "ip link add name b type veth peer name pb", "ip link add name c type veth peer name pc",
		"sysctl -qw net.ipv4.conf.b.rp_filter=1", "sysctl -qw net.ipv4.conf.c.rp_filter=2"); err != nil {
		t.Fatal(err)
	}
	values := func() string {
		return strings.Join(strings.Fields(ns.MustRun(t, "sh", "-c", "cat /proc/sys/net/ipv4/conf/a/rp_filter /proc/sys/net/ipv4/conf/b/rp_filter /proc/sys/net/ipv4/conf/c/rp_filter")), " ")
	}
	path := filepath.Join(t.TempDir(), StateFile)
	do := func(f func() error) {
		t.Helper()
		if err := ns.Do(func() error {
			if err := privileged.ReadOnlyProcSys(); err != nil {
				return err
			}
			return f()
		}); err != nil {
			t.Fatal(err)
		}
	}
	var index map[string]int
	do(func() error {
		index = map[string]int{}
		for _, name := range []string{"a", "b", "c"} {
			ifi, err := net.InterfaceByName(name)
			if err != nil {
				return err
			}
			index[name] = ifi.Index
		}
		return nil
	})
	want := func(names ...string) map[int]string {
		out := map[int]string{}
		for _, n := range names {
			out[index[n]] = n
		}
		return out
	}
	syncAs := func(complete bool, names ...string) (loosened, restored []string) {
		t.Helper()
		do(func() (err error) {
			l, err := OpenLoosener(path)
			if err != nil {
				return err
			}
			loosened, restored, err = l.Sync(want(names...), complete)
			return err
		})
		return loosened, restored
	}
	sync := func(names ...string) (loosened, restored []string) { t.Helper(); return syncAs(true, names...) }

	if l, r := sync("a", "b", "c"); !slices.Equal(l, []string{"a", "b"}) || len(r) != 0 {
		t.Errorf("first sync loosened %v, restored %v; want [a b] (c is loose already), none", l, r)
	}
	if got := values(); got != "2 2 2" {
		t.Errorf("rp_filter of a, b, c: %s, want 2 2 2", got)
	}
	b, _ := os.ReadFile(path)
	if got := string(b); got != `{"a":0,"b":1}` {
		t.Errorf("%s holds %s, want the values before", path, got)
	}
	if l, r := sync("a", "b", "c"); len(l) != 0 || len(r) != 0 {
		t.Errorf("the same again loosened %v, restored %v; want nothing", l, r)
	}
	if l, r := syncAs(false, "b"); len(l) != 0 || len(r) != 0 {
		t.Errorf("an incomplete want without a: loosened %v, restored %v; want nothing (a may still be used)", l, r)
	}
	if l, r := sync("b"); len(l) != 0 || !slices.Equal(r, []string{"a"}) {
		t.Errorf("a no longer wanted: loosened %v, restored %v; want a restored", l, r)
	}
	if got := values(); got != "0 2 2" {
		t.Errorf("rp_filter of a, b, c after a was put back: %s, want 0 2 2", got)
	}
	// Someone sets b to 1 and a is loosened again; cleanup puts a back, and b stays theirs.
	sync("a", "b")
	if err := ns.Script("sysctl -qw net.ipv4.conf.b.rp_filter=0"); err != nil {
		t.Fatal(err)
	}
	do(func() error { return Restore(path) })
	if got := values(); got != "0 0 2" {
		t.Errorf("rp_filter of a, b, c after Restore: %s, want 0 0 2 (b changed since: left)", got)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s after Restore: %v, want it gone", path, err)
	}
	do(func() error { return Restore(path) }) // nothing to do: no file

	// A file it cannot read is moved aside, reported, and the loosener starts empty.
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ns.Do(func() error {
		l, err := OpenLoosener(path)
		if err == nil || l == nil || len(l.Loosened()) != 0 {
			return fmt.Errorf("OpenLoosener of a broken file: %v, %v; want an error and an empty loosener", l, err)
		}
		_, err = os.Stat(path + ".bad")
		return err
	}); err != nil {
		t.Error(err)
	}
}
