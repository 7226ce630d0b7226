package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The table names the versions the go.mod files pin, direct or indirect; "?" when it cannot.
func TestVersion(t *testing.T) {
	gomod := filepath.Join(t.TempDir(), "go.mod")
	doc := "module x\n\ngo 1.26.0\n\nrequire github.com/flannel-io/flannel v0.28.10\n\nrequire (\n\tk8s.io/api v0.34.10 // indirect\n)\n"
	if err := os.WriteFile(gomod, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	for module, want := range map[string]string{"github.com/flannel-io/flannel": "v0.28.10", "k8s.io/api": "v0.34.10", "k8s.io/none": "?"} {
		if got := version(gomod, module); got != want {
			t.Errorf("version(%s) = %s, want %s", module, got, want)
		}
	}
	if got := version(filepath.Join(t.TempDir(), "absent"), "k8s.io/api"); got != "?" {
		t.Errorf("version of an absent go.mod = %s, want ?", got)
	}
}
