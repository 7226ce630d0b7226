package rpfilter

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestOpenLoosenerReadsWhatAnEarlierAgentLoosened: a restarted agent knows the interfaces its
// predecessor loosened and their previous values; no file, or one holding null, is nothing
// loosened.
func TestOpenLoosenerReadsWhatAnEarlierAgentLoosened(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, StateFile)
	if err := os.WriteFile(path, []byte(`{"eth1":1,"bond0":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLoosener(path)
	if err != nil || !slices.Equal(l.Loosened(), []string{"bond0", "eth1"}) || l.prev["eth1"] != 1 {
		t.Errorf("loosened %v (%v), error %v; want bond0 and eth1, previously 1", l.Loosened(), l.prev, err)
	}
	for name, content := range map[string]string{"missing": "", "null": "null"} {
		p := filepath.Join(dir, name)
		if content != "" {
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		l, err := OpenLoosener(p)
		if err != nil || len(l.Loosened()) != 0 || l.prev == nil {
			t.Errorf("%s: loosened %v, error %v; want nothing, usable", name, l.Loosened(), err)
		}
	}
}

// TestOpenLoosenerMovesABadFileAside: a file that cannot be read is moved to .bad and
// reported; the loosener starts empty, and the next save does not mix with it.
func TestOpenLoosenerMovesABadFileAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), StateFile)
	if err := os.WriteFile(path, []byte(`{"eth1":`), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLoosener(path)
	if err == nil || !strings.Contains(err.Error(), "moved to "+path+".bad") {
		t.Errorf("error %v, want the file said moved aside", err)
	}
	if l == nil || len(l.Loosened()) != 0 {
		t.Fatalf("loosener %v, want an empty one", l)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the bad file is still at %s (%v)", path, err)
	}
	if b, err := os.ReadFile(path + ".bad"); err != nil || string(b) != `{"eth1":` {
		t.Errorf("%s.bad holds %q (%v), want the bad file", path, b, err)
	}
}

// TestSyncForgetsInterfacesGone: once the interfaces wanted are known in full, an interface
// loosened before and gone since is forgotten (nothing to put back) and the file goes with the
// last one; while they are not known in full, nothing is put back nor forgotten.
func TestSyncForgetsInterfacesGone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", StateFile)
	l, _ := OpenLoosener(path)
	l.prev["egtest-gone0"] = 1
	if err := l.save(); err != nil {
		t.Fatal(err)
	}
	var saved map[string]int
	if b, err := os.ReadFile(path); err != nil || json.Unmarshal(b, &saved) != nil || saved["egtest-gone0"] != 1 {
		t.Fatalf("the file holds %s (%v), want the previous value", b, err)
	}
	if _, restored, err := l.Sync(nil, false); err != nil || len(restored) != 0 || len(l.Loosened()) != 1 {
		t.Errorf("incomplete: restored %v, loosened %v, error %v; want nothing put back", restored, l.Loosened(), err)
	}
	_, restored, err := l.Sync(nil, true)
	if err != nil || !slices.Equal(restored, []string{"egtest-gone0"}) || len(l.Loosened()) != 0 {
		t.Errorf("complete: restored %v, loosened %v, error %v; want the gone interface forgotten", restored, l.Loosened(), err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file is still there with nothing loosened (%v)", err)
	}
}
