package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// waitChained waits until the node's primary CNI configuration ends with egressd-cni.
func waitChained(t *testing.T, n *lab.Node, what string) {
	t.Helper()
	file := filepath.Join(n.CNIConfDir(), "10-lab.conflist")
	poll.Eventually(t, what+": egressd-cni chained on "+n.Name, 10*time.Second, func() error {
		l, err := libcni.ConfListFromFile(file)
		if err != nil {
			return err
		}
		var types []string
		for _, p := range l.Plugins {
			types = append(types, p.Network.Type)
		}
		if len(types) != 2 || types[1] != "egressd-cni" {
			return fmt.Errorf("chain %v", types)
		}
		return nil
	})
}

// TestPrivilegedCNIInstalledByTheAgent: each node's CNI directory holds only its primary
// plugin's list, as a cluster's CNI writes it; egressd installs egressd-cni (binary and chain
// entry) itself, and pods created from that directory, as containerd creates them, are under
// policy from their first packet. The primary CNI rewriting its file loses the entry for a
// moment only.
func TestPrivilegedCNIInstalledByTheAgent(t *testing.T) {
	privileged.Require(t)
	l, count, denied, open := sinkLab(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true, InstallCNI: true})
	ctx := context.Background()
	const d = 300 * time.Millisecond
	for _, n := range l.Nodes {
		waitChained(t, n, "at start")
		for _, bin := range []string{"egressd-cni", cniapi.RouterHelper} {
			if fi, err := os.Stat(filepath.Join(n.CNIBinDir(), bin)); err != nil || fi.Mode().Perm()&0o111 == 0 {
				t.Fatalf("%s not installed in %s: %v", bin, n.CNIBinDir(), err)
			}
		}
		for round, what := range []string{"installed", "after the primary CNI rewrote its list"} {
			if round == 1 {
				if err := n.WritePrimaryCNI(); err != nil {
					t.Fatal(err)
				}
				waitChained(t, n, what)
			}
			start, sent := floodOnStart(t, "203.0.113.10:9000", d)
			before := settled(count) // the previous node's open flood may still be arriving
			p, err := n.AddPod(ctx, denied, fmt.Sprintf("first-%d-%s", round, n.Name), lab.PodOptions{Started: start})
			if err != nil {
				t.Fatal(err)
			}
			s := sent()
			time.Sleep(200 * time.Millisecond) // the last datagrams drain
			if got := count() - before; got != 0 || s == 0 {
				t.Errorf("%s, %s (%s CNI): %d of %d datagrams sent from the instant ADD returned reached the sink, want 0 (of some)", what, p.Name, n.CNI, got, s)
			} else {
				t.Logf("%s, %s (%s CNI): 0 of %d datagrams out; egressd-cni ADD %s", what, p.Name, n.CNI, s, p.CNIPlugins["egressd-cni ADD"].Round(time.Microsecond))
			}
		}
		// The chain works for a namespace without policy: the flood reaches the sink.
		start, sent := floodOnStart(t, "203.0.113.10:9000", d)
		before := count()
		if _, err := n.AddPod(ctx, open, "open-"+n.Name, lab.PodOptions{Started: start}); err != nil {
			t.Fatal(err)
		}
		s := sent()
		poll.Eventually(t, "the open namespace's flood arrives", 5*time.Second, func() error {
			if got := count() - before; got == 0 {
				return fmt.Errorf("0 of %d datagrams arrived", s)
			}
			return nil
		})
	}
}
