package nodeagent

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// shared are the packages below the features, which any of them may import: the compile
// input and node facts, the leader's loops, the CNI plugin's wire protocol.
var shared = map[string]bool{
	"github.com/egressd/egressd/nodeagent/cluster":          true,
	"github.com/egressd/egressd/nodeagent/leader":           true,
	"github.com/egressd/egressd/nodeagent/cniserver/cniapi": true,
}

// TestFeaturesImportNoOtherFeature: a feature package of nodeagent never imports another one,
// so that an API is added (or changed) in its own package; what several share lives in shared.
func TestFeaturesImportNoOtherFeature(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/egressd/egressd/nodeagent/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const root = "github.com/egressd/egressd/nodeagent"
	s := bufio.NewScanner(bytes.NewReader(out))
	for s.Scan() {
		fields := strings.Fields(s.Text())
		pkg := fields[0]
		if pkg == root || shared[pkg] {
			continue // the sync loop lists the features; shared packages import none
		}
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, root+"/") && !shared[imp] && !strings.HasPrefix(imp, pkg+"/") {
				t.Errorf("%s imports %s: move what both read into a shared package (%v)", pkg, imp, shared)
			}
		}
	}
}
