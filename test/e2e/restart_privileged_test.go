package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/egressd/egressd/dataplane/tc"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedAgentRestartKeepsEnforcing: egressd is killed and restarted while a pod streams
// to an allowed and to a denied destination: no allowed datagram is lost, no denied one passes.
func TestPrivilegedAgentRestartKeepsEnforcing(t *testing.T) {
	privileged.Require(t)
	l, _, p := streamLab(t)
	checkStreamsThrough(t, p, 400, 10*time.Millisecond, "across the restart", func() { // 4 s of traffic
		time.Sleep(500 * time.Millisecond) // the scenario: streams flowing, then
		l.Nodes[0].Agent.Kill()            // a crash, mid-stream,
		time.Sleep(500 * time.Millisecond) // and half a second without an agent
		start := time.Now()
		if err := l.Nodes[0].StartAgent(context.Background()); err != nil {
			t.Error(err)
			return
		}
		t.Logf("agent back and ready %s after restart", time.Since(start).Round(time.Millisecond))
	})
}

// TestPrivilegedAgentUpgradeNewMapLayout: an upgrade whose maps changed layout, under traffic.
// Between the old agent's end and the new one's start the pinned maps are replaced by maps of
// another layout (what a new version meets): the new agent starts afresh with new maps, the
// old program keeps enforcing with its own until the new maps are filled, then the new
// program takes its place. No allowed datagram is lost, no denied one passes.
func TestPrivilegedAgentUpgradeNewMapLayout(t *testing.T) {
	privileged.Require(t)
	l, _, p := streamLab(t)
	root := lab.PinRoot(l.ID, l.Nodes[0].Name)
	var before ebpf.MapID
	checkStreamsThrough(t, p, 400, 10*time.Millisecond, "across the upgrade", func() {
		time.Sleep(500 * time.Millisecond)
		l.Nodes[0].Agent.Kill()
		before = replaceWithOtherLayout(t, filepath.Join(root, "egressd_pods"))
		start := time.Now()
		if err := l.Nodes[0].StartAgent(context.Background()); err != nil {
			t.Error(err)
			return
		}
		t.Logf("upgraded agent ready %s after start", time.Since(start).Round(time.Millisecond))
	})
	// The new agent made its own map, and its program, on the pod's link, uses it.
	after := pinnedMapID(t, filepath.Join(root, "egressd_pods"))
	if after == before {
		t.Fatalf("egressd_pods is still map %d: the new agent did not start afresh", before)
	}
	ids := ingressMaps(t, l.Nodes[0], p.HostLink)
	if !slices.Contains(ids, after) {
		t.Errorf("the pod's interface runs a program with maps %v, not the new egressd_pods %d", ids, after)
	}
}

// replaceWithOtherLayout pins, in place of the map pinned at path, a map of another layout, and
// returns the replaced map's id.
func replaceWithOtherLayout(t *testing.T, path string) ebpf.MapID {
	t.Helper()
	id := pinnedMapID(t, path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 20, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Pin(path); err != nil {
		t.Fatal(err)
	}
	return id
}

func pinnedMapID(t *testing.T, path string) ebpf.MapID {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return id
}

// ingressMaps returns the maps of egressd's classifier at ingress of the node's ifname.
func ingressMaps(t *testing.T, n *lab.Node, ifname string) []ebpf.MapID {
	t.Helper()
	progs, err := n.IngressPrograms(ifname)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(progs, func(p tc.Program) bool { return p.Name == tc.ProgramName })
	if i < 0 {
		t.Fatalf("no %s at ingress of %s/%s: %v", tc.ProgramName, n.Name, ifname, progs)
	}
	prog, err := ebpf.NewProgramFromID(progs[i].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := info.MapIDs()
	return ids
}
