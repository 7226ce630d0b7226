package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestInstallCNI: the init container's command copies egressd-cni into the plugin directory,
// executable, again without change when it is there; when it cannot, it says why in the failure
// file and still exits 0 (the agent must start), and a later success removes the file.
func TestInstallCNI(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "egressd-cni-src")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plugins, failure := filepath.Join(dir, "bin"), filepath.Join(dir, "install-cni.failed")
	run := func(into string) {
		t.Helper()
		var stderr bytes.Buffer
		if code := installCNI([]string{"--cni-bin-dir", into, "--cni-plugin-binary", bin, "--failure-file", failure}, &stderr); code != 0 {
			t.Fatalf("into %s: exit %d: %s", into, code, stderr.String())
		}
	}
	run(filepath.Join(dir, "missing"))
	if b, err := os.ReadFile(failure); err != nil || !bytes.Contains(b, []byte("install egressd-cni into "+filepath.Join(dir, "missing"))) {
		t.Errorf("failure file after a failed install: %q, %v; want the directory named", b, err)
	}
	if err := os.Mkdir(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		run(plugins)
		fi, err := os.Stat(filepath.Join(plugins, "egressd-cni"))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Fatalf("run %d: installed plugin: %v, %v; want mode 0755", i, fi, err)
		}
		if _, err := os.Stat(failure); !os.IsNotExist(err) {
			t.Errorf("run %d: the failure file is still there after a success (%v)", i, err)
		}
	}
}
