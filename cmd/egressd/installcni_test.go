package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallCNI: the init container's command copies egressd-cni into the plugin directory,
// executable, again without change when it is there, and says so in the status file; when it
// cannot, it says why there and still exits 0 (the agent must start).
func TestInstallCNI(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "egressd-cni-src")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
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
	run(missing, "failed: install egressd-cni into "+missing)
	if err := os.Mkdir(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		run(plugins, "installed\n")
		fi, err := os.Stat(filepath.Join(plugins, "egressd-cni"))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Fatalf("run %d: installed plugin: %v, %v; want mode 0755", i, fi, err)
		}
	}
}
