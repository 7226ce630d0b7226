package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
)

// TestInstallCNI: the init container's command copies egressd-cni and its router helper into
// the plugin directory, executable, again without change when it is there, and says so in the status file; when it
// cannot, it says why there and still exits 0 (the agent must start).
func TestInstallCNI(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "egressd-cni-src")
	for _, f := range []string{bin, filepath.Join(dir, cniapi.RouterHelper)} {
		if err := os.WriteFile(f, []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	plugins, status := filepath.Join(dir, "bin"), filepath.Join(dir, "install-cni.status")
	run := func(into, want string) {
		t.Helper()
		var stderr bytes.Buffer
		if code := installCNI([]string{"--cni-bin-dir", into, "--cni-plugin-binary", bin, "--status-file", status}, &stderr); code != 0 {
			t.Fatalf("into %s: exit %d: %s", into, code, stderr.String())
		}
		if b, err := os.ReadFile(status); err != nil || !strings.HasPrefix(string(b), want) {
			t.Errorf("into %s: status %q, %v; want it to start with %q", into, b, err, want)
		}
	}
	missing := filepath.Join(dir, "missing")
	run(missing, "failed: install "+cniapi.RouterHelper+" into "+missing)
	if err := os.Mkdir(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		run(plugins, "installed\n")
		for _, name := range []string{"egressd-cni", cniapi.RouterHelper} {
			fi, err := os.Stat(filepath.Join(plugins, name))
			if err != nil || fi.Mode().Perm() != 0o755 {
				t.Fatalf("run %d: installed %s: %v, %v; want mode 0755", i, name, fi, err)
			}
		}
	}
}
