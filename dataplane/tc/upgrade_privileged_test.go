package tc_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/tc"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// podNS is a namespace with an interface pod0 (its peer in another namespace) and a pin root.
func podNS(t *testing.T, name string) (*netns.NS, string) {
	t.Helper()
	a, b := netns.New(t, fmt.Sprintf("egressd-tc-%s-%d", name, os.Getpid())), netns.New(t, fmt.Sprintf("egressd-tcp-%s-%d", name, os.Getpid()))
	netns.Veth(t, a, "pod0", b, "eth0")
	root := fmt.Sprintf("/sys/fs/bpf/egressd-test-tc-%s-%d", name, os.Getpid())
	t.Cleanup(func() { os.RemoveAll(root) })
	return a, root
}

// ingress is what runs at ingress of pod0: "<attachment> <program name> <program id>" in order.
// (Inside netns.Do, where t.Fatal would never return: a failure is an error.)
func ingress(t *testing.T) []string {
	t.Helper()
	progs, err := tc.Query("pod0")
	if err != nil {
		t.Error(err)
	}
	var out []string
	for _, p := range progs {
		out = append(out, fmt.Sprintf("%s %s %d", p.Attachment, p.Name, p.ID))
	}
	return out
}

func programID(t *testing.T, p *ebpf.Program) ebpf.ProgramID {
	t.Helper()
	info, err := p.Info()
	if err != nil {
		t.Error(err)
		return 0
	}
	id, _ := info.ID()
	return id
}

// foreign attaches a program that is not egressd's at tcx ingress and egress of pod0, as a
// CNI's own.
func foreign(t *testing.T) error {
	t.Helper()
	ifi, err := net.InterfaceByName("pod0")
	if err != nil {
		return err
	}
	return foreignAt(t, ifi.Index)
}

// foreignAt attaches a CNI's program at tcx ingress and egress of the interface, until the
// test ends.
func foreignAt(tb testing.TB, ifindex int) error {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "cni_prog", Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		return err
	}
	defer p.Close()
	for _, hook := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
		l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: p, Attach: hook})
		if err != nil {
			return err
		}
		tb.Cleanup(func() { l.Close() })
	}
	return nil
}

// TestPrivilegedUpgradeKeepsPredecessorUntilSync: after an upgrade that changed a map's layout
// (the new agent's maps start empty), the adopted attachment keeps running the predecessor's
// program with its maps until the new agent's first Sync, which swaps the new program in place
// (never detached, never attached twice): for a tc filter (an interface with no other program)
// and for a tcx link (an interface where a CNI's program runs).
func TestPrivilegedUpgradeKeepsPredecessorUntilSync(t *testing.T) {
	privileged.Require(t)
	for _, c := range []struct {
		name    string
		foreign bool
		want    string // the attachment of ours
	}{{"filter", false, "tc filter pref 49152 handle 0x1"}, {"tcx", true, "tcx link"}} {
		t.Run(c.name, func(t *testing.T) {
			ns, root := podNS(t, c.name)
			err := ns.Do(func() error {
				ifi, err := net.InterfaceByName("pod0")
				if err != nil {
					return err
				}
				if c.foreign {
					if err := foreign(t); err != nil {
						return err
					}
				}
				want := map[string]int{"pod0": ifi.Index}
				old, err := classifier.Load(root, classifier.Options{})
				if err != nil {
					return err
				}
				defer old.Close()
				at, err := tc.New(root, tc.Ingress, old.Program)
				if err != nil {
					return err
				}
				if errs := tc.Sync(want, at); len(errs) > 0 {
					return fmt.Errorf("%v", errs)
				}
				at.Close()
				before := ingress(t)
				ourFirst := fmt.Sprintf("egressd_frompod %d", programID(t, old.Program))
				if len(before) != map[bool]int{false: 1, true: 2}[c.foreign] || !contains(before[0], c.want) || !contains(before[0], ourFirst) {
					return fmt.Errorf("ingress of pod0 runs %q, want first egressd_frompod through a %s", before, c.want)
				}

				// The upgrade: a pinned map's layout differs from the new program's.
				pods := filepath.Join(root, "egressd_pods")
				os.Remove(pods)
				m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 20, ValueSize: 4, MaxEntries: 1})
				if err != nil {
					return err
				}
				if err := m.Pin(pods); err != nil {
					return err
				}
				m.Close()
				upgraded, err := classifier.Load(root, classifier.Options{})
				if err != nil {
					return err
				}
				defer upgraded.Close()
				at, err = tc.New(root, tc.Ingress, upgraded.Program)
				if err != nil {
					return err
				}
				defer at.Close()
				if got := ingress(t); !slices.Equal(got, before) {
					t.Errorf("before the first Sync ingress runs %q, want the predecessor's %q", got, before)
				}
				if errs := tc.Sync(want, at); len(errs) > 0 {
					return fmt.Errorf("%v", errs)
				}
				after := slices.Clone(before)
				after[0] = replaceID(before[0], programID(t, old.Program), programID(t, upgraded.Program))
				if got := ingress(t); !slices.Equal(got, after) {
					t.Errorf("after Sync ingress runs %q, want %q (the same attachment, the new program)", got, after)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPrivilegedFirstBeforeAProgramAddedLater: our filter moves to the head of the tcx chain
// when a CNI's program comes to the hook after it (a tcx program that ends the chain would skip
// every filter), and Cleanup leaves the interface as it found it: no filter, no clsact qdisc, no
// pinned link; the CNI's program untouched.
func TestPrivilegedFirstBeforeAProgramAddedLater(t *testing.T) {
	privileged.Require(t)
	ns, root := podNS(t, "later")
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName("pod0")
		if err != nil {
			return err
		}
		qdiscs := func() string { out, _ := ns.Run("tc", "qdisc", "show", "dev", "pod0"); return out }
		bare := qdiscs()
		c, err := classifier.Load(root, classifier.Options{})
		if err != nil {
			return err
		}
		defer c.Close()
		at, err := tc.New(root, tc.Ingress, c.Program)
		if err != nil {
			return err
		}
		want := map[string]int{"pod0": ifi.Index}
		if errs := tc.Sync(want, at); len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		id := programID(t, c.Program)
		if got := ingress(t); len(got) != 1 || got[0] != fmt.Sprintf("tc filter pref 49152 handle 0x1 egressd_frompod %d", id) {
			return fmt.Errorf("alone on pod0: ingress runs %q, want egressd's filter", got)
		}
		if err := foreign(t); err != nil {
			return err
		}
		if errs := tc.Sync(want, at); len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		if got := ingress(t); len(got) != 2 || !contains(got[1], "egressd_frompod") {
			return fmt.Errorf("a sync right after a CNI's tcx program came: ingress runs %q, want egressd's filter still (looked at once a minute)", got)
		}
		defer func(d time.Duration) { *tc.Recheck = d }(*tc.Recheck)
		*tc.Recheck = 0
		if errs := tc.Sync(want, at); len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		got := ingress(t)
		if len(got) != 2 || !contains(got[0], fmt.Sprintf("egressd_frompod %d", id)) || !contains(got[0], "tcx link") || !contains(got[1], "cni_prog") {
			return fmt.Errorf("after a CNI's tcx program came: ingress runs %q, want egressd's first in the tcx chain, its filter gone", got)
		}
		at.Close() // the agent stopped
		if err := tc.Cleanup(root); err != nil {
			return err
		}
		if got := ingress(t); len(got) != 1 || !contains(got[0], "cni_prog") {
			t.Errorf("after Cleanup ingress runs %q, want the CNI's program only", got)
		}
		if got := qdiscs(); got != bare {
			t.Errorf("after Cleanup the qdiscs of pod0 are\n%s\nwant as before\n%s", got, bare)
		}
		if _, err := os.Stat(tc.LinksDir(root)); !os.IsNotExist(err) {
			t.Errorf("after Cleanup %s: %v, want it gone", tc.LinksDir(root), err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// replaceID replaces the program ID at the end of an ingress line.
func replaceID(line string, old, new ebpf.ProgramID) string {
	return strings.TrimSuffix(line, fmt.Sprint(old)) + fmt.Sprint(new)
}

// TestPrivilegedFirstBeforeACNIFilter: where a CNI runs its own tc filter at one hook of a new
// interface (egress here, in the clsact qdisc it added), egressd attaches first in that hook's
// tcx chain, and by a filter at the other hook.
func TestPrivilegedFirstBeforeACNIFilter(t *testing.T) {
	privileged.Require(t)
	ns, root := podNS(t, "cnifilter")
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName("pod0")
		if err != nil {
			return err
		}
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "cni_prog", Type: ebpf.SchedCLS, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
		if err != nil {
			return err
		}
		defer p.Close()
		if err := netlink.QdiscAdd(&netlink.GenericQdisc{QdiscType: "clsact", QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: ifi.Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}); err != nil {
			return err
		}
		if err := netlink.FilterAdd(&netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: ifi.Index,
			Parent: netlink.HANDLE_MIN_EGRESS, Handle: 1, Priority: 1, Protocol: unix.ETH_P_ALL},
			Fd: p.FD(), Name: "cni_prog", DirectAction: true}); err != nil {
			return err
		}
		c, in, out, err := bothHooks(t, root)
		if err != nil {
			return err
		}
		if errs := tc.Sync(map[string]int{"pod0": ifi.Index}, in, out); len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		if got := ingress(t); len(got) != 1 || !contains(got[0], "tc filter pref 49152") {
			t.Errorf("ingress runs %q, want egressd's filter alone", got)
		}
		res, err := link.QueryPrograms(link.QueryOptions{Target: ifi.Index, Attach: ebpf.AttachTCXEgress})
		if err != nil {
			return err
		}
		if len(res.Programs) != 1 || res.Programs[0].ID != programID(t, c.ToPod) {
			t.Errorf("tcx egress runs %v, want egressd's egress program, ahead of the CNI's filter", res.Programs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPrivilegedFilterBackAfterQdiscDeleted: egressd's filters are attached again, at both
// hooks, by the first Attach that looks again after the interface's clsact qdisc was deleted
// behind egressd's back.
func TestPrivilegedFilterBackAfterQdiscDeleted(t *testing.T) {
	privileged.Require(t)
	ns, root := podNS(t, "qdiscdel")
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName("pod0")
		if err != nil {
			return err
		}
		_, in, out, err := bothHooks(t, root)
		if err != nil {
			return err
		}
		want := map[string]int{"pod0": ifi.Index}
		if errs := tc.Sync(want, in, out); len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		if _, err := ns.Run("tc", "qdisc", "del", "dev", "pod0", "clsact"); err != nil {
			return err
		}
		defer func(d time.Duration) { *tc.Recheck = d }(*tc.Recheck)
		*tc.Recheck = 0
		if errs := tc.Sync(want, in, out); len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		for _, dir := range []string{"ingress", "egress"} {
			got, err := ns.Run("tc", "filter", "show", "dev", "pod0", dir)
			if err != nil {
				return err
			}
			if !contains(got, "pref 49152") || !contains(got, "egressd_") {
				t.Errorf("%s of pod0 after the qdisc was deleted and a sync looked again:\n%s\nwant egressd's filter", dir, got)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// bothHooks loads the classifier under root and makes the attachers of both hooks, closed when
// the test ends.
func bothHooks(tb testing.TB, root string) (c *classifier.Classifier, in, out *tc.Attacher, err error) {
	if c, err = classifier.Load(root, classifier.Options{}); err != nil {
		return nil, nil, nil, err
	}
	tb.Cleanup(c.Close)
	if in, err = tc.New(root, tc.Ingress, c.Program); err != nil {
		return nil, nil, nil, err
	}
	tb.Cleanup(in.Close)
	if out, err = tc.New(root, tc.Egress, c.ToPod); err != nil {
		return nil, nil, nil, err
	}
	tb.Cleanup(out.Close)
	return c, in, out, nil
}

// TestPrivilegedAdoptedFilterBackAfterQdiscDeleted: a filter adopted from the previous agent
// whose clsact qdisc is deleted before the new agent's first Attach is attached afresh by it.
func TestPrivilegedAdoptedFilterBackAfterQdiscDeleted(t *testing.T) {
	privileged.Require(t)
	ns, root := podNS(t, "adoptgone")
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName("pod0")
		if err != nil {
			return err
		}
		c, err := classifier.Load(root, classifier.Options{})
		if err != nil {
			return err
		}
		defer c.Close()
		want := map[string]int{"pod0": ifi.Index}
		previous, err := tc.New(root, tc.Ingress, c.Program)
		if err != nil {
			return err
		}
		if errs := tc.Sync(want, previous); len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		previous.Close() // the previous agent stopped
		next, err := tc.New(root, tc.Ingress, c.Program)
		if err != nil {
			return err
		}
		defer next.Close()
		if _, err := ns.Run("tc", "qdisc", "del", "dev", "pod0", "clsact"); err != nil {
			return err
		}
		if errs := tc.Sync(want, next); len(errs) > 0 {
			return fmt.Errorf("the first Sync after the adopted filter's qdisc was deleted: %v", errs)
		}
		if got := ingress(t); len(got) != 1 || !contains(got[0], "tc filter pref 49152") {
			t.Errorf("ingress runs %q, want egressd's filter again", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
