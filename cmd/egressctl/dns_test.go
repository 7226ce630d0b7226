package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/watchers/dnsnames"
)

// egressctl dns shows, per name, what the agent resolved and what it learned from answers to
// pods with the time left; what expired is not shown.
func TestDNSShowsLearnedAddresses(t *testing.T) {
	dir := t.TempDir()
	soon := time.Now().Add(90 * time.Second).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Second).UTC().Format(time.RFC3339)
	for name, content := range map[string]string{
		dnsnames.StateFile:   `{"www.example.com":["203.0.113.10"]}`,
		dnsnames.LearnedFile: `{"www.example.com":{"203.0.113.11":"` + soon + `","203.0.113.12":"` + past + `"},"a.cdn.example.com":{"2001:db8::7":"` + soon + `"}}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out, errs bytes.Buffer
	if code := run([]string{"dns", "--cni-socket", filepath.Join(dir, "cni.sock")}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "a.cdn.example.com") || !strings.Contains(lines[1], "2001:db8::7 (1m") ||
		!strings.Contains(lines[2], "203.0.113.10") || !strings.Contains(lines[2], "203.0.113.11 (1m") || strings.Contains(out.String(), "203.0.113.12") {
		t.Errorf("egressctl dns:\n%s", out.String())
	}
}
