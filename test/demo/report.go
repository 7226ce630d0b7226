package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/egressd/egressd/test/lab"
)

// checker prints expected vs observed and counts mismatches, per API (the section a step
// opens), for make test-compat's table.
type checker struct {
	failures int
	section  string
	report   Report
}

// Report is what a demo run writes with --report: the lab's CNI and kube-proxy and, per
// section in the order run, how many checks passed and which failed.
type Report struct {
	CNI       string     `json:"cni"`
	KubeProxy string     `json:"kubeProxy"`
	Sections  []*Section `json:"sections"`
}

// Section is one API's (or the lab's own) checks.
type Section struct {
	Name   string   `json:"name"`
	Passed int      `json:"passed"`
	Failed []string `json:"failed,omitempty"`
}

// step prints a step's title; a step that names a section starts counting its checks there.
func (c *checker) step(section, format string, a ...any) {
	if section != "" {
		c.section = section
	}
	fmt.Printf("\n==> "+format+"\n", a...)
}

func (c *checker) check(what, expected, observed string) {
	mark := "ok  "
	s := c.current()
	if expected != observed {
		mark = "FAIL"
		c.failures++
		s.Failed = append(s.Failed, fmt.Sprintf("%s: expected %s, observed %s", what, expected, observed))
	} else {
		s.Passed++
	}
	fmt.Printf("  [%s] %-44s expected: %s\n         %-44s observed: %s\n", mark, what, expected, "", observed)
}

func (c *checker) current() *Section {
	for _, s := range c.report.Sections {
		if s.Name == c.section {
			return s
		}
	}
	s := &Section{Name: c.section}
	c.report.Sections = append(c.report.Sections, s)
	return s
}

func (c *checker) write(path string) error {
	b, err := json.MarshalIndent(c.report, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// printTrouble prints what the agents logged at warning or error level (their last 40 such
// lines each), before the lab and its logs go: a failed check in make test-compat is explained
// from the demo's own output.
func printTrouble(l *lab.Lab) {
	for _, n := range l.Nodes {
		if n.Agent == nil {
			continue
		}
		var trouble []string
		for _, line := range strings.Split(n.Agent.Log(), "\n") {
			if strings.Contains(line, " level=WARN ") || strings.Contains(line, " level=ERROR ") {
				trouble = append(trouble, line)
			}
		}
		fmt.Printf("\n==> egressd on %s: its last warnings and errors (%d in all)\n", n.Name, len(trouble))
		for _, line := range trouble[max(0, len(trouble)-40):] {
			fmt.Println("  " + line)
		}
	}
}
