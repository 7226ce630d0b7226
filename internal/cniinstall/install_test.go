package cniinstall

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
)

const flannel = `{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel","delegate":{"hairpinMode":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}`

func installer(t *testing.T) *Installer {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "src-egressd-cni")
	for file, content := range map[string]string{bin: "#!/bin/true\n", filepath.Join(dir, cniapi.RouterHelper): "#!/bin/false\n"} {
		if err := os.WriteFile(file, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	in := &Installer{Binary: bin, BinDir: filepath.Join(dir, "bin"), ConfDir: filepath.Join(dir, "net.d"),
		Entry: map[string]any{"type": PluginType, "socket": "/run/egressd/cni.sock"}, Log: slog.New(slog.DiscardHandler)}
	for _, d := range []string{in.BinDir, in.ConfDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return in
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// types reads a configuration list the way the runtime does and returns its plugins' types.
func types(t *testing.T, file string) []string {
	t.Helper()
	l, err := libcni.ConfListFromFile(file)
	if err != nil {
		t.Fatalf("the runtime cannot read %s: %v", file, err)
	}
	var out []string
	for _, p := range l.Plugins {
		out = append(out, p.Network.Type)
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEnsureAppendsToThePrimaryList(t *testing.T) {
	in := installer(t)
	primaryFile := write(t, in.ConfDir, "10-flannel.conflist", flannel)
	other := write(t, in.ConfDir, "99-other.conflist", `{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"bridge"}]}`)
	file, err := in.ensure()
	if err != nil || file != primaryFile {
		t.Fatalf("ensure = %q, %v; want %s", file, err, primaryFile)
	}
	if got := types(t, primaryFile); !equal(got, []string{"flannel", "portmap", PluginType}) {
		t.Errorf("chain %v", got)
	}
	var conf map[string]any
	raw, _ := os.ReadFile(primaryFile)
	_ = json.Unmarshal(raw, &conf)
	if conf["cniVersion"] != "0.3.1" || conf["name"] != "cbr0" {
		t.Errorf("the list's version and name changed: %v", conf)
	}
	if got := types(t, other); !equal(got, []string{"bridge"}) {
		t.Errorf("a file the runtime does not use was changed: %v", got)
	}
	// Idempotent.
	if file, err := in.ensure(); err != nil || file != "" {
		t.Errorf("second ensure = %q, %v; want no change", file, err)
	}
	// Not last, duplicated, or with another config: put back once, last, as configured.
	write(t, in.ConfDir, "10-flannel.conflist", `{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel"},{"type":"egressd-cni","socket":"/old"},{"type":"portmap"},{"type":"egressd-cni"}]}`)
	if _, err := in.ensure(); err != nil {
		t.Fatal(err)
	}
	l, _ := libcni.ConfListFromFile(primaryFile)
	if got := types(t, primaryFile); !equal(got, []string{"flannel", "portmap", PluginType}) || !json.Valid(l.Plugins[2].Bytes) ||
		string(l.Plugins[2].Bytes) != `{"socket":"/run/egressd/cni.sock","type":"egressd-cni"}` {
		t.Errorf("chain %v, entry %s", got, l.Plugins[len(l.Plugins)-1].Bytes)
	}
}

func TestEnsureTurnsASinglePluginIntoAList(t *testing.T) {
	in := installer(t)
	conf := write(t, in.ConfDir, "10-calico.conf", `{"cniVersion":"0.3.1","name":"k8s-pod-network","type":"calico","ipam":{"type":"calico-ipam"}}`)
	file, err := in.ensure()
	want := filepath.Join(in.ConfDir, "10-calico.conflist")
	if err != nil || file != want {
		t.Fatalf("ensure = %q, %v; want %s", file, err, want)
	}
	if got := types(t, want); !equal(got, []string{"calico", PluginType}) {
		t.Errorf("chain %v", got)
	}
	if _, err := os.Stat(conf); !os.IsNotExist(err) {
		t.Errorf("the single plugin's file is still there (%v): the runtime would read it first", err)
	}
}

func TestEnsureWithoutConfiguration(t *testing.T) {
	in := installer(t)
	if _, err := in.ensure(); err == nil {
		t.Error("no primary configuration yet, and no error")
	}
	write(t, in.ConfDir, "10-broken.conflist", `{"plugins":`)
	if _, err := in.ensure(); err == nil {
		t.Error("a broken primary configuration, and no error")
	}
}

// The primary CNI rewriting its file (an upgrade, a restart) drops the entry: it comes back.
func TestRunKeepsTheEntryAndUninstallRemovesIt(t *testing.T) {
	in := installer(t)
	primaryFile := write(t, in.ConfDir, "10-flannel.conflist", flannel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	waitChain := func(what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			l, err := libcni.ConfListFromFile(primaryFile)
			if err == nil && len(l.Plugins) == 3 && l.Plugins[2].Network.Type == PluginType {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: egressd-cni not chained in %s", what, primaryFile)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitChain("at start")
	if b, err := os.ReadFile(filepath.Join(in.BinDir, PluginType)); err != nil || string(b) != "#!/bin/true\n" {
		t.Errorf("binary %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(in.BinDir, cniapi.RouterHelper)); err != nil || string(b) != "#!/bin/false\n" {
		t.Errorf("router helper %q, %v", b, err)
	}
	start := time.Now()
	write(t, in.ConfDir, "10-flannel.conflist", flannel)
	waitChain("after the primary CNI rewrote its file")
	t.Logf("chained again %v after the rewrite", time.Since(start).Round(time.Millisecond))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := types(t, primaryFile); !equal(got, []string{"flannel", "portmap", PluginType}) {
		t.Errorf("the entry must stay when the agent stops (upgrade): %v", got)
	}

	if err := Uninstall(in.BinDir, in.ConfDir); err != nil {
		t.Fatal(err)
	}
	if got := types(t, primaryFile); !equal(got, []string{"flannel", "portmap"}) {
		t.Errorf("after Uninstall: %v", got)
	}
	for _, name := range []string{PluginType, cniapi.RouterHelper} {
		if _, err := os.Stat(filepath.Join(in.BinDir, name)); !os.IsNotExist(err) {
			t.Errorf("%s left after Uninstall: %v", name, err)
		}
	}
	if err := Uninstall(filepath.Join(in.BinDir, "none"), filepath.Join(in.ConfDir, "none")); err != nil {
		t.Errorf("Uninstall of nothing: %v", err)
	}
}

// A primary CNI that puts its own configuration back whenever the file differs (Cilium's
// agent) does not make the installer rewrite the file forever: after churnWrites chainings
// within a window it waits, longer each time.
func TestRunBacksOffFromAPrimaryThatFights(t *testing.T) {
	defer func(w int, p time.Duration) { churnWrites, churnPause = w, p }(churnWrites, churnPause)
	churnWrites, churnPause = 3, time.Second
	in := installer(t)
	primaryFile := write(t, in.ConfDir, "05-cilium.conflist", flannel)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	// The fighting primary: its own bytes back at once, whenever they changed.
	writes := 0
	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		if b, err := os.ReadFile(primaryFile); err == nil && string(b) != flannel {
			writes++
			write(t, in.ConfDir, "05-cilium.conflist", flannel)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Three chainings, a pause of 1 s, one more, then 2 s: five at most in 3 s (each takes
	// about 0.1 s without the back-off: some thirty).
	if writes < 3 || writes > 5 {
		t.Errorf("the installer chained egressd-cni %d times in 3 s against a primary that undoes it, want 3 to 5", writes)
	}
}

// The back-off grows while the fight lasts (its own waits do not count as a quiet window), up to
// its cap, and ends after a quiet window.
func TestChurn(t *testing.T) {
	var c churn
	now := time.Unix(0, 0)
	var pauses []time.Duration
	for range 12 {
		p := c.wrote(now)
		pauses = append(pauses, p)
		now = now.Add(100*time.Millisecond + p) // the primary undoes each chaining at once
	}
	want := []time.Duration{0, 0, 0, 0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
		160 * time.Second, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	if !slices.Equal(pauses, want) {
		t.Errorf("pauses %v, want %v", pauses, want)
	}
	if p := c.wrote(now.Add(churnWindow + churnPauseMax + time.Second)); p != 0 {
		t.Errorf("after a quiet window: pause %v, want none", p)
	}
}

// TestRunWithoutBinDirOnlyChains: with the binary installed by the init container (no BinDir),
// the agent chains the plugin and writes nothing into any plugin directory.
func TestRunWithoutBinDirOnlyChains(t *testing.T) {
	in := installer(t)
	plugins := in.BinDir
	in.BinDir = ""
	write(t, in.ConfDir, "10-flannel.conflist", flannel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(in.ConfDir, "10-flannel.conflist"))
		if bytes.Contains(b, []byte(PluginType)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not chained after 5 s:\n%s", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(plugins); len(entries) != 0 {
		t.Errorf("the plugin directory holds %v, want nothing", entries)
	}
}

// TestRunFollowsTheInitContainersStatus: a chained plugin the runtime cannot find would fail
// every new pod, so after the init container's failure the agent reports it and chains
// nothing; after its success, a leftover --cni-bin-dir whose directory is not mounted any more
// does not keep the agent from chaining.
func TestRunFollowsTheInitContainersStatus(t *testing.T) {
	for _, tc := range []struct {
		name, status, binDir string
		chained              bool
	}{
		{"failed", "failed: install egressd-cni into /host/opt/cni/bin: permission denied\n", "", false},
		{"installed, leftover --cni-bin-dir", "installed\n", "/nonexistent/opt/cni/bin", true},
	} {
		in := installer(t)
		in.BinDir, in.StatusFile = tc.binDir, filepath.Join(t.TempDir(), "install-cni.status")
		list := write(t, in.ConfDir, "10-flannel.conflist", flannel)
		if err := os.WriteFile(in.StatusFile, []byte(tc.status), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := in.Run(ctx)
		cancel()
		b, _ := os.ReadFile(list)
		if chained := bytes.Contains(b, []byte(PluginType)); chained != tc.chained {
			t.Errorf("%s: chained %v, want %v (Run: %v)", tc.name, chained, tc.chained, err)
		}
		if !tc.chained && (err == nil || !strings.Contains(err.Error(), "permission denied")) {
			t.Errorf("%s: Run: %v, want the init container's failure", tc.name, err)
		}
	}
}

// A rewrite keeps the file's permissions (a primary CNI may keep its file private).
func TestEnsureKeepsTheMode(t *testing.T) {
	in := installer(t)
	primaryFile := write(t, in.ConfDir, "10-flannel.conflist", flannel)
	if err := os.Chmod(primaryFile, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := in.ensure(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(primaryFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after the chaining: %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if err := Uninstall(in.BinDir, in.ConfDir); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(primaryFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after Uninstall: %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}

// The primary CNI writing its file between the read and the rename of an edit: its new content
// is not lost, the edit starts again from it.
func TestEnsureRedoesAnEditOfAFileChangedMeanwhile(t *testing.T) {
	in := installer(t)
	primaryFile := write(t, in.ConfDir, "10-flannel.conflist", flannel)
	newer := `{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel"},{"type":"bandwidth"}]}`
	writes := 0
	beforeCompare = func() {
		if writes++; writes == 1 {
			write(t, in.ConfDir, "10-flannel.conflist", newer)
		}
	}
	t.Cleanup(func() { beforeCompare = func() {} })
	if file, err := in.ensure(); err != nil || file != primaryFile {
		t.Fatalf("ensure = %q, %v; want %s", file, err, primaryFile)
	}
	if got := types(t, primaryFile); !equal(got, []string{"flannel", "bandwidth", PluginType}) {
		t.Errorf("chain %v, want the primary's new content with egressd-cni", got)
	}
	// Uninstall too.
	writes = 0
	newer = `{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel"},{"type":"tuning"},{"type":"egressd-cni"}]}`
	if err := Uninstall(in.BinDir, in.ConfDir); err != nil {
		t.Fatal(err)
	}
	if got := types(t, primaryFile); !equal(got, []string{"flannel", "tuning"}) {
		t.Errorf("after Uninstall: %v, want the primary's new content without egressd-cni", got)
	}
	// A file that changes under every edit: an error, nothing renamed over it.
	beforeCompare = func() {
		writes++
		write(t, in.ConfDir, "10-flannel.conflist", strings.Replace(flannel, "cbr0", fmt.Sprint("cbr", writes), 1))
	}
	if _, err := in.ensure(); err == nil || !strings.Contains(err.Error(), "changed under each") {
		t.Errorf("ensure on a file changing under every edit: %v", err)
	}
	if got := types(t, primaryFile); !equal(got, []string{"flannel", "portmap"}) {
		t.Errorf("chain %v, want the primary's last write", got)
	}
}

// A router helper missing beside the plugin (an image of its own) does not keep the plugin
// out: only router pods need the helper.
func TestInstallBinaryWithoutTheRouterHelper(t *testing.T) {
	dir := t.TempDir()
	bin, into := filepath.Join(dir, "egressd-cni"), filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(into, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := InstallBinary(bin, into, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("install without the helper: %v", err)
	}
	if _, err := os.Stat(filepath.Join(into, PluginType)); err != nil {
		t.Errorf("plugin not installed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(into, cniapi.RouterHelper)); !os.IsNotExist(err) {
		t.Errorf("a helper installed from nothing: %v", err)
	}
}
