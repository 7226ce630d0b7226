package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestInstallCNI: the init container's command copies egressd-cni into the plugin directory,
// executable, again without change when it is there, and fails (exit 1, saying why) when it
// cannot.
func TestInstallCNI(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "egressd-cni-src")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plugins := filepath.Join(dir, "bin")
	if err := os.Mkdir(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		var stderr bytes.Buffer
		if code := installCNI([]string{"--cni-bin-dir", plugins, "--cni-plugin-binary", bin}, &stderr); code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, code, stderr.String())
		}
		fi, err := os.Stat(filepath.Join(plugins, "egressd-cni"))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Fatalf("run %d: installed plugin: %v, %v; want mode 0755", i, fi, err)
		}
	}
	var stderr bytes.Buffer
	if code := installCNI([]string{"--cni-bin-dir", filepath.Join(dir, "missing"), "--cni-plugin-binary", bin}, &stderr); code != 1 ||
		!bytes.Contains(stderr.Bytes(), []byte("install egressd-cni into "+filepath.Join(dir, "missing"))) {
		t.Errorf("into a missing directory: exit %d, %q; want 1 and the directory named", code, stderr.String())
	}
}
