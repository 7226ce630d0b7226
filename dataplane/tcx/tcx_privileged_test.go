package tcx_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/tcx"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedUpgradeKeepsPredecessorUntilSync: after an upgrade that changed a map's layout
// (the new agent's maps start empty), the adopted link keeps running the predecessor's program
// with its maps until the new agent's first Sync, which swaps the new program in place (same
// link, never detached).
func TestPrivilegedUpgradeKeepsPredecessorUntilSync(t *testing.T) {
	privileged.Require(t)
	a, b := netns.New(t, fmt.Sprintf("egressd-tcx-a-%d", os.Getpid())), netns.New(t, fmt.Sprintf("egressd-tcx-b-%d", os.Getpid()))
	netns.Veth(t, a, "pod0", b, "eth0")
	root := fmt.Sprintf("/sys/fs/bpf/egressd-test-tcx-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(root) })
	err := a.Do(func() error {
		ifi, err := net.InterfaceByName("pod0")
		if err != nil {
			return err
		}
		want := map[string]int{"pod0": ifi.Index}
		old, err := classifier.Load(root, classifier.Options{})
		if err != nil {
			return err
		}
		defer old.Close()
		at, err := tcx.New(root, tcx.Ingress, old.Program)
		if err != nil {
			return err
		}
		if errs := at.Sync(want); len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		at.Close()
		oldID, linkID := programOf(t, root), linkOf(t, root)

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
		newInfo, err := upgraded.Program.Info()
		if err != nil {
			return err
		}
		newID, _ := newInfo.ID()
		at, err = tcx.New(root, tcx.Ingress, upgraded.Program)
		if err != nil {
			return err
		}
		defer at.Close()
		if got := programOf(t, root); got != oldID {
			t.Errorf("adopted link runs program %d before the first Sync, want the predecessor's %d", got, oldID)
		}
		if errs := at.Sync(want); len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		if got := programOf(t, root); got != newID {
			t.Errorf("after Sync the link runs program %d, want the new %d", got, newID)
		}
		if got := linkOf(t, root); got != linkID {
			t.Errorf("link %d replaced by %d, want it updated in place", linkID, got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func pinnedLink(t *testing.T, root string) *link.Info {
	t.Helper()
	l, err := link.LoadPinnedLink(filepath.Join(tcx.LinksDir(root), "tcx_ingress_pod0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func programOf(t *testing.T, root string) ebpf.ProgramID { return pinnedLink(t, root).Program }

func linkOf(t *testing.T, root string) link.ID { return pinnedLink(t, root).ID }
