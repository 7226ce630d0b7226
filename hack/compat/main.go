// Command compat runs the demo's scenarios (one section per API) on each CNI and kube-proxy
// mode of the lab, prints the compatibility table and, with -write, puts it in docs/compat.md
// (make test-compat). It exits non-zero if any check failed.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
)

// report is what test/demo writes with --report.
type report struct {
	CNI       string `json:"cni"`
	KubeProxy string `json:"kubeProxy"`
	Sections  []struct {
		Name   string   `json:"name"`
		Passed int      `json:"passed"`
		Failed []string `json:"failed"`
	} `json:"sections"`
}

// kubeProxies are the modes of kube-proxy the lab offers (IPVS needs a kernel with IP_VS).
var kubeProxies = []string{"stand-in", "iptables", "nftables"}

// matrix is each CNI of test/demo's --cni with the kube-proxy modes it runs with: Cilium's
// kube-proxy replacement runs without one.
var matrix = []struct {
	cni   string
	modes []string
}{
	{"routed+bridged", kubeProxies}, {"flannel", kubeProxies}, {"cilium", kubeProxies},
	{"cilium-native", kubeProxies}, {"cilium-kpr", []string{"none"}},
}

func main() {
	only := flag.String("only", "", "comma-separated <cni>/<kube-proxy> combinations to run (default: all)")
	write := flag.Bool("write", false, "write the table into docs/compat.md")
	flag.Parse()
	dir, err := os.MkdirTemp("", "egressd-compat-")
	if err != nil {
		fail(err)
	}
	demo := filepath.Join(dir, "demo")
	fmt.Println("building test/demo")
	if out, err := exec.Command("go", "build", "-o", demo, "./test/demo").CombinedOutput(); err != nil {
		fail(fmt.Errorf("build test/demo: %v\n%s", err, out))
	}
	var combos [][2]string
	var all []string
	for _, row := range matrix {
		for _, m := range row.modes {
			all = append(all, row.cni+"/"+m)
			if *only == "" || slices.Contains(strings.Split(*only, ","), row.cni+"/"+m) {
				combos = append(combos, [2]string{row.cni, m})
			}
		}
	}
	if len(combos) == 0 {
		fail(fmt.Errorf("-only %q names none of %s", *only, strings.Join(all, ",")))
	}
	var reports []report
	failed := false
	for i, c := range combos {
		name := c[0] + "-" + c[1]
		log, path := filepath.Join(dir, name+".log"), filepath.Join(dir, name+".json")
		fmt.Printf("[%d/%d] CNI %s, kube-proxy %s (log: %s)\n", i+1, len(combos), c[0], c[1], log)
		start := time.Now()
		err := run(demo, log, "--cni", c[0], "--kube-proxy", c[1], "--report", path)
		var r report
		b, rerr := os.ReadFile(path)
		if rerr == nil {
			rerr = json.Unmarshal(b, &r)
		}
		if rerr != nil { // the demo stopped before its checks: show why
			fmt.Printf("      the demo stopped: %v; its log ends:\n%s\n", err, tail(log, 30))
			failed = true
			continue
		}
		for _, s := range r.Sections {
			for _, f := range s.Failed {
				fmt.Printf("      FAIL %s: %s\n", s.Name, f)
				failed = true
			}
		}
		fmt.Printf("      done in %s\n", time.Since(start).Round(time.Second))
		reports = append(reports, r)
	}
	table := render(reports)
	fmt.Println()
	fmt.Print(table)
	if *write {
		if err := writeDoc(table); err != nil {
			fail(err)
		}
		fmt.Println("\nwrote docs/compat.md and README.md")
	}
	if failed {
		os.Exit(1)
	}
}

func run(bin, log string, args ...string) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	return cmd.Run()
}

// render is the table: a row per CNI and kube-proxy mode, a column per section.
func render(reports []report) string {
	var sections []string
	for _, r := range reports {
		for _, s := range r.Sections {
			if !slices.Contains(sections, s.Name) {
				sections = append(sections, s.Name)
			}
		}
	}
	var b strings.Builder
	b.WriteString("| CNI | kube-proxy | " + strings.Join(sections, " | ") + " |\n")
	b.WriteString("|---|---|" + strings.Repeat("---|", len(sections)) + "\n")
	for _, r := range reports {
		fmt.Fprintf(&b, "| %s | %s |", r.CNI, r.KubeProxy)
		for _, name := range sections {
			cell := "not run"
			for _, s := range r.Sections {
				if s.Name != name {
					continue
				}
				cell = fmt.Sprintf("pass (%d)", s.Passed)
				if len(s.Failed) > 0 {
					cell = fmt.Sprintf("**FAIL** (%d of %d)", len(s.Failed), len(s.Failed)+s.Passed)
				}
			}
			b.WriteString(" " + cell + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// writeDoc replaces the generated part of docs/compat.md and README.md (between their markers)
// with the table, the versions it ran and the date.
func writeDoc(table string) error {
	for _, path := range []string{"docs/compat.md", "README.md"} {
		if err := writeBetween(path, table); err != nil {
			return err
		}
	}
	return nil
}

func writeBetween(path, table string) error {
	const begin, end = "<!-- BEGIN make test-compat -->", "<!-- END make test-compat -->"
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %s ... %s", path, begin, end)
	}
	gen := fmt.Sprintf("%s\nLast run %s: flannel %s, Cilium %s, kube-proxy %s (k8s.io/kubernetes), the reference CNI plugins %s.\n\n%s%s",
		begin, time.Now().UTC().Format("2006-01-02"), version("test/tools/flannel/go.mod", "github.com/flannel-io/flannel"),
		version("test/tools/cilium/go.mod", "github.com/cilium/cilium"),
		version("test/tools/node/go.mod", "k8s.io/kubernetes"), version("test/tools/cniplugins/go.mod", "github.com/containernetworking/plugins"),
		table, end)
	return os.WriteFile(path, []byte(string(doc[:i])+gen+string(doc[j+len(end):])), 0o644)
}

// version is the version a go.mod requires of a module.
func version(gomod, module string) string {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "?"
	}
	f, err := modfile.ParseLax(gomod, b, nil)
	if err != nil {
		return "?"
	}
	for _, r := range f.Require {
		if r.Mod.Path == module {
			return r.Mod.Version
		}
	}
	return "?"
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "compat:", err)
	os.Exit(1)
}
