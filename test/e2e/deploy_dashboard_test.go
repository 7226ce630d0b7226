package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// scrapeLabels are the labels Prometheus gives every series of the agents' ServiceMonitor
// (node by its relabeling); a metric's own label of the same name is renamed exported_<name>.
var scrapeLabels = []string{"job", "instance", "namespace", "pod", "container", "service", "endpoint", "node"}

// exportedMetrics reads the metrics reference, which the agent's registered collectors
// generate (a golden test keeps it so), into each series name the agent exposes and its
// labels; histograms expose _bucket (with le), _sum and _count.
func exportedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/reference/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `(egressd_[a-z0-9_]+)` \\| ([a-z]+) \\| ([^|]*) \\|")
	out := map[string][]string{"up": nil}
	for _, line := range strings.Split(string(raw), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" && l != "—" {
				labels = append(labels, l)
			}
		}
		if m[2] == "histogram" {
			out[m[1]+"_bucket"] = append(slices.Clone(labels), "le")
			out[m[1]+"_sum"], out[m[1]+"_count"] = labels, labels
			continue
		}
		out[m[1]] = labels
	}
	if len(out) < 20 {
		t.Fatalf("%d metrics in docs/reference/metrics.md: the table's format changed", len(out))
	}
	return out
}

var (
	selector    = regexp.MustCompile(`\b(egressd_[a-z0-9_]+|up)\b(\{[^}]*\})?`)
	matcherName = regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)`)
	grouping    = regexp.MustCompile(`\b(?:by|on|ignoring|without)\s*\(([^)]*)\)`)
	labelValues = regexp.MustCompile(`label_values\(\s*([a-z0-9_]+)\s*,\s*([a-z_]+)\s*\)`)
)

// checkQuery finds what in a PromQL expression the agents' scrape cannot give: a metric the
// agent does not export, a label a matcher or grouping names that neither the expression's
// metrics nor the scrape carry (exported_node only where a metric has its own node label).
func checkQuery(expr string, exported map[string][]string) []error {
	var errs []error
	known := slices.Clone(scrapeLabels)
	sels := selector.FindAllStringSubmatch(expr, -1)
	for _, v := range labelValues.FindAllStringSubmatch(expr, -1) {
		sels = append(sels, []string{v[0], v[1], fmt.Sprintf("{%s=\"\"}", v[2])})
	}
	if len(sels) == 0 {
		return []error{fmt.Errorf("%q reads no egressd metric", expr)}
	}
	for _, m := range sels {
		labels, ok := exported[m[1]]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: the agent does not export it", m[1]))
			continue
		}
		known = append(known, labels...)
		if slices.Contains(labels, "node") {
			known = append(known, "exported_node")
		}
	}
	for _, m := range sels {
		for _, mm := range matcherName.FindAllStringSubmatch(m[2], -1) {
			if !slices.Contains(known, mm[1]) {
				errs = append(errs, fmt.Errorf("%s: no label %s", m[1], mm[1]))
			}
		}
	}
	for _, g := range grouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !slices.Contains(known, l) {
				errs = append(errs, fmt.Errorf("groups by %s, a label none of its metrics has", l))
			}
		}
	}
	return errs
}

// TestDeployDashboard checks the Grafana dashboard of deploy/monitoring: every panel queries,
// every query and variable reads metrics the agent exports with the labels they have, and the
// kustomization ships it as the ConfigMap Grafana's sidecar loads.
func TestDeployDashboard(t *testing.T) {
	dir := filepath.Join(deployDir, "monitoring")
	raw, err := os.ReadFile(filepath.Join(dir, "egressd-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	exported := exportedMetrics(t)
	queries := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			for _, err := range checkQuery(q.Expr, exported) {
				t.Errorf("panel %q: %v", p.Title, err)
			}
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition == "" {
			continue
		}
		for _, err := range checkQuery(v.Definition, exported) {
			t.Errorf("variable %s: %v", v.Name, err)
		}
	}
	if dash.UID == "" || queries < 20 {
		t.Errorf("dashboard uid %q with %d queries", dash.UID, queries)
	}

	type generator struct {
		Files   []string `json:"files"`
		Options struct {
			Labels map[string]string `json:"labels"`
		} `json:"options"`
	}
	var k struct {
		ConfigMapGenerator []generator `json:"configMapGenerator"`
	}
	raw, err = os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(k.ConfigMapGenerator, func(g generator) bool {
		return slices.Contains(g.Files, "egressd-dashboard.json") && g.Options.Labels["grafana_dashboard"] == "1"
	}) {
		t.Errorf("deploy/monitoring/kustomization.yaml ships no ConfigMap of egressd-dashboard.json labelled grafana_dashboard=1")
	}
}
