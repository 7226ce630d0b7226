// Package frr runs FRR's bfdd (with the zebra it needs) inside a test network namespace, as a
// real BFD peer, and reads its state with vtysh.
package frr

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/test/netns"
)

// Daemons are FRR's zebra and bfdd of one namespace.
type Daemons struct {
	ns  *netns.NS
	dir string
}

// StartBFDD starts zebra then bfdd (bfdd peers bound to an interface need zebra) in ns with the
// given bfdd configuration; both are stopped when the test ends.
func StartBFDD(t testing.TB, ns *netns.NS, bfddConf string) *Daemons {
	t.Helper()
	if _, err := os.Stat("/usr/lib/frr/bfdd"); err != nil {
		t.Fatalf("FRR is not installed (apt-get install frr): %v", err)
	}
	dir, err := os.MkdirTemp("", "egressd-frr-")
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemons{ns: ns, dir: dir}
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "bfdd.log"))
			t.Logf("bfdd log:\n%s", b)
		}
		os.RemoveAll(dir)
	})
	if err := os.WriteFile(filepath.Join(dir, "bfdd.conf"), []byte(bfddConf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "zebra.conf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The daemons drop privileges to the frr user; it must own its run directory.
	u, err := user.Lookup("frr")
	if err != nil {
		t.Fatalf("no frr user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chown(p, uid, gid) })
	common := []string{"-d", "-N", filepath.Base(dir), "-z", filepath.Join(dir, "zserv.api"), "--vty_socket", dir, "-u", "frr", "-g", "frr"}
	for _, daemon := range []string{"zebra", "bfdd"} {
		args := append([]string{"-f", filepath.Join(dir, daemon+".conf"), "-i", filepath.Join(dir, daemon+".pid"),
			"--log", "file:" + filepath.Join(dir, daemon+".log")}, common...)
		if daemon == "bfdd" {
			args = append(args, "--bfdctl", filepath.Join(dir, "bfdd.sock"))
		}
		if out, err := ns.Command("/usr/lib/frr/"+daemon, args...).CombinedOutput(); err != nil {
			t.Fatalf("start %s: %v: %s", daemon, err, out)
		}
		if err := waitFile(filepath.Join(dir, daemon+".vty"), 10*time.Second); err != nil {
			t.Fatalf("%s did not start: %v", daemon, err)
		}
	}
	return d
}

func waitFile(p string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(p); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not appear within %s", p, timeout)
}

func (d *Daemons) stop() {
	for _, daemon := range []string{"bfdd", "zebra"} {
		b, err := os.ReadFile(filepath.Join(d.dir, daemon+".pid"))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Vtysh runs vtysh commands against these daemons.
func (d *Daemons) Vtysh(cmds ...string) (string, error) {
	args := []string{"--vty_socket", d.dir}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out, err := exec.Command("vtysh", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("vtysh %v: %w: %s", cmds, err, out)
	}
	return string(out), nil
}

// Configure applies configuration lines under "bfd" / "peer ..." (e.g. "transmit-interval 100").
func (d *Daemons) Configure(peerLine string, lines ...string) error {
	cmds := append([]string{"configure terminal", "bfd", peerLine}, lines...)
	_, err := d.Vtysh(cmds...)
	return err
}

// Peer is bfdd's view of one session (fields of "show bfd peers json").
type Peer struct {
	Peer             string `json:"peer"`
	Status           string `json:"status"`
	Diagnostic       string `json:"diagnostic"`
	RemoteDiagnostic string `json:"remote-diagnostic"`
	ID               uint32 `json:"id"`
	RemoteID         uint32 `json:"remote-id"`
	TransmitInterval int    `json:"transmit-interval"`
	ReceiveInterval  int    `json:"receive-interval"`
	RemoteTransmit   int    `json:"remote-transmit-interval"`
	RemoteReceive    int    `json:"remote-receive-interval"`
	RemoteMult       int    `json:"remote-detect-multiplier"`
}

// Peers returns bfdd's sessions.
func (d *Daemons) Peers() ([]Peer, error) {
	out, err := d.Vtysh("show bfd peers json")
	if err != nil {
		return nil, err
	}
	var peers []Peer
	if err := json.Unmarshal([]byte(out), &peers); err != nil {
		return nil, fmt.Errorf("parse %q: %w", out, err)
	}
	return peers, nil
}

// PeerStatus returns bfdd's status ("up", "down", "init", "shutdown") of the session to peer.
func (d *Daemons) PeerStatus(peer string) string {
	peers, _ := d.Peers()
	for _, p := range peers {
		if p.Peer == peer {
			return p.Status
		}
	}
	return ""
}
