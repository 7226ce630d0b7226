// Package golden compares a test's output with a file kept under testdata/, MetalLB style:
//
//	golden.Assert(t, "testdata/table.golden", got)
//
// On a mismatch the test fails with a line diff (- want, + got). `go test -update` (the flag
// this package registers in every test binary that imports it) rewrites the files with what the
// tests produce instead; review the change with git diff before committing it.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files with the tests' output")

// Updating reports whether the test binary runs with -update.
func Updating() bool { return *update }

// Assert fails t unless got equals the content of the golden file at path; with -update it
// writes got to path (creating its directory) and passes.
func Assert[T ~string | ~[]byte](t testing.TB, path string, got T) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden file: %v (go test -update writes it)", err)
	}
	if d := Diff(string(want), string(got)); d != "" {
		t.Errorf("%s differs (- want, + got; go test -update rewrites it):\n%s", path, d)
	}
}

// Diff is a line diff of want and got, empty when they are equal: lines only in want start
// with "- ", lines only in got with "+ ", and up to 3 unchanged lines around each change with
// "  " ("..." stands for the unchanged lines left out).
func Diff(want, got string) string {
	if want == got {
		return ""
	}
	a, b := splitLines(want), splitLines(got)
	// lcs[i][j]: length of the longest common subsequence of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		op   byte
		text string
	}
	var lines []line
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			lines = append(lines, line{' ', a[i]})
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			lines = append(lines, line{'-', a[i]})
			i++
		default:
			lines = append(lines, line{'+', b[j]})
			j++
		}
	}
	const context = 3
	var out strings.Builder
	skipped := false
	for k, l := range lines {
		near := false
		for d := max(0, k-context); d <= min(len(lines)-1, k+context); d++ {
			near = near || lines[d].op != ' '
		}
		if !near {
			if !skipped {
				out.WriteString("...\n")
			}
			skipped = true
			continue
		}
		skipped = false
		text := l.text
		if !strings.HasSuffix(text, "\n") {
			text += "\n\\ no newline at end\n"
		}
		out.WriteString(string(l.op) + " " + text)
	}
	return out.String()
}

// splitLines splits s after each newline; a last line without one is a line too.
func splitLines(s string) []string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}
