// Command testsummary reads `go test -json` on stdin, prints package results, the output of
// failed tests and a summary, and exits non-zero if anything failed, or if a privileged test
// skipped while EGRESSD_REQUIRE_PRIVILEGED=1 (CI must run every tier).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	if !summarize(os.Stdin, os.Stdout, os.Getenv("EGRESSD_REQUIRE_PRIVILEGED") == "1") {
		os.Exit(1)
	}
}

// summarize reads go test -json events from in and writes the summary to out; false: a test
// or package failed, or (requirePriv) a privileged test skipped.
func summarize(in io.Reader, out io.Writer, requirePriv bool) bool {
	output := map[string]*strings.Builder{}
	var passed, failed, skipped []string
	var badSkips []string
	reasons := map[string][]string{} // failed test -> its t.Error/t.Fatal lines
	pkgFailed := false
	start := time.Now()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(out, sc.Text()) // build errors are not JSON
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			b := output[key]
			if b == nil {
				b = &strings.Builder{}
				output[key] = b
			}
			b.WriteString(e.Output)
			if e.Test == "" && strings.HasPrefix(e.Output, "FAIL") {
				fmt.Fprint(out, e.Output)
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				if e.Action == "skip" {
					continue // a package without tests
				}
				fmt.Fprintf(out, "%-4s %s (%.1fs)\n", strings.ToUpper(e.Action), e.Package, e.Elapsed)
				if e.Action == "fail" {
					pkgFailed = true
					printUnfinished(out, output, e.Package)
				}
				continue
			}
			switch e.Action {
			case "pass":
				passed = append(passed, key)
			case "fail":
				failed = append(failed, key)
				if b := output[key]; b != nil {
					fmt.Fprintf(out, "--- FAIL %s\n%s", key, b.String())
					reasons[key] = failureLines(b.String())
				}
			case "skip":
				skipped = append(skipped, key)
				if strings.Contains(e.Test, "Privileged") && requirePriv {
					badSkips = append(badSkips, key)
				}
			}
			delete(output, key)
		}
	}
	sort.Strings(skipped)
	fmt.Fprintf(out, "\n== %d passed, %d failed, %d skipped in %s\n", len(passed), len(failed), len(skipped), time.Since(start).Round(time.Second))
	if all := len(passed) + len(failed) + len(skipped); all > 0 {
		root := privileged(passed) + privileged(failed) + privileged(skipped)
		fmt.Fprintf(out, "   %d of %d tests need root (%.1f%%; subtests count as tests, as above)\n", root, all, 100*float64(root)/float64(all))
	}
	for _, s := range skipped {
		fmt.Fprintln(out, "   skipped:", s)
	}
	// Again at the end: a failed test's own lines are otherwise buried under the logs it dumps,
	// and CI shows only the tail.
	for _, key := range failed {
		for _, line := range reasons[key] {
			fmt.Fprintf(out, "   %s: %s\n", key, line)
		}
	}
	for _, s := range badSkips {
		fmt.Fprintln(out, "   privileged test skipped in CI (counts as a failure):", s)
	}
	return len(failed) == 0 && len(badSkips) == 0 && !pkgFailed
}

// privileged counts the tests (package and name) of the root-only tier: named Privileged, or
// subtests of those.
func privileged(keys []string) int {
	n := 0
	for _, k := range keys {
		if strings.Contains(k, "Privileged") {
			n++
		}
	}
	return n
}

// printUnfinished prints the package's own output and that of its tests that never reported a
// result: a binary that dies mid-test (a panic in a goroutine, the race detector's
// halt_on_error, a timeout) leaves its cause in the output of whichever test was running.
func printUnfinished(out io.Writer, output map[string]*strings.Builder, pkg string) {
	var keys []string
	for key := range output {
		if strings.HasPrefix(key, pkg+" ") {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		if key != pkg+" " {
			fmt.Fprintf(out, "--- UNFINISHED %s\n", key)
		}
		fmt.Fprint(out, output[key].String())
		delete(output, key)
	}
}

// failureLines picks, from a test's output, the lines a test file itself printed (t.Error,
// t.Fatal and helpers marked t.Helper report a _test.go position), at most 3 lines of each and
// 12 in all.
var position = regexp.MustCompile(`^\s+\S+\.go:\d+: `)

func failureLines(out string) []string {
	var picked []string
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if colon := strings.Index(t, ": "); colon < 0 || !strings.Contains(t[:colon], "_test.go:") {
			continue
		}
		for j := i; j < len(lines) && j < i+3; j++ {
			if j > i && position.MatchString(lines[j]) { // the next message
				break
			}
			picked = append(picked, strings.TrimSpace(lines[j]))
		}
		if len(picked) >= 12 {
			return picked[:12]
		}
	}
	return picked
}
