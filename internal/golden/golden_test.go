package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeT records what Assert reports instead of failing the real test.
type fakeT struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Errorf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
}
func (f *fakeT) Fatalf(format string, args ...any) { f.failed = true; f.msg = format }
func (f *fakeT) Fatal(args ...any)                 { f.failed = true }

func TestAssert(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "x.golden")
	func() { // -update writes the file, creating its directory
		*update = true
		defer func() { *update = false }()
		Assert(t, path, "a\nb\nc\n")
	}()
	if b, err := os.ReadFile(path); err != nil || string(b) != "a\nb\nc\n" {
		t.Fatalf("-update wrote %q, %v", b, err)
	}

	same := &fakeT{TB: t}
	Assert(same, path, []byte("a\nb\nc\n"))
	if same.failed {
		t.Errorf("equal content failed: %s", same.msg)
	}

	other := &fakeT{TB: t}
	Assert(other, path, "a\nB\nc\n")
	if !other.failed {
		t.Fatal("different content passed")
	}
	for _, want := range []string{path, "-update", "- b\n+ B\n"} {
		if !strings.Contains(other.msg, want) {
			t.Errorf("failure message lacks %q:\n%s", want, other.msg)
		}
	}

	missing := &fakeT{TB: t}
	Assert(missing, filepath.Join(t.TempDir(), "none.golden"), "x")
	if !missing.failed {
		t.Error("a missing golden file passed")
	}
}

func TestDiff(t *testing.T) {
	want := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"
	got := "1\n2\n3\n4\n5\nsix\n7\n8\n9\n10\n11"
	d := Diff(want, got)
	exp := "...\n  3\n  4\n  5\n- 6\n+ six\n  7\n  8\n  9\n  10\n+ 11\n\\ no newline at end\n"
	if d != exp {
		t.Errorf("Diff:\n%s\nwant:\n%s", d, exp)
	}
	if Diff(want, want) != "" {
		t.Error("equal texts differ")
	}
}
