package lab_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/egressd/egressd/test/lab"
)

// TestSweepLeavesLabsBeingMade: a directory still being made (makeDir) is swept only when the
// process that makes it is dead; one whose pid was written by a live process, or with no pid
// yet, stays. A Sweep of another test binary removed a lab between its pid and its rename.
func TestSweepLeavesLabsBeingMade(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(lab.StateRoot(), 0o755); err != nil {
		t.Fatal(err)
	}
	making := func(pid int) string {
		t.Helper()
		dir, err := os.MkdirTemp(lab.StateRoot(), ".new-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if pid > 0 {
			if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	live, noPid, gone := making(os.Getpid()), making(0), making(dead.Process.Pid)
	lab.Sweep(io.Discard)
	for _, d := range []string{live, noPid} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s (being made) was swept: %v", filepath.Base(d), err)
		}
	}
	if _, err := os.Stat(gone); err == nil {
		t.Errorf("%s, made by a dead process, was left", filepath.Base(gone))
	}
}
