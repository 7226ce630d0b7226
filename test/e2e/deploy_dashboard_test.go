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

// The jobs of deploy/monitoring's two scrapes: the Prometheus Operator names a ServiceMonitor's
// job after the Service it scrapes.
const (
	agentJob      = "egressd-metrics"
	controllerJob = "egressd-controller-metrics"
)

// scrapeLabels are the labels Prometheus gives every series of a job: the agents'
// ServiceMonitor adds node (the agent's node, by its relabeling), so that a metric's own label
// of that name would be renamed exported_<name>; the controller's adds none, and the
// controller's metrics keep their own node label (an egress node, a probed node).
var scrapeLabels = map[string][]string{
	agentJob:      {"job", "instance", "namespace", "pod", "container", "service", "endpoint", "node"},
	controllerJob: {"job", "instance", "namespace", "pod", "container", "service", "endpoint"},
}

// metric is a series name one of egressd's processes exposes: its labels, and the job that
// scrapes it.
type metric struct {
	labels []string
	job    string
}

// exportedMetrics reads the metrics references, which the agent's and the controller's
// registered collectors generate (a golden test keeps them so), into each series name a
// process exposes, its labels and its job; histograms expose _bucket (with le), _sum and
// _count. up is each job's.
func exportedMetrics(t *testing.T) map[string]metric {
	t.Helper()
	out := map[string]metric{"up": {}}
	for _, ref := range []struct{ file, job string }{
		{"../../docs/reference/metrics.md", agentJob},
		{"../../docs/reference/controller-metrics.md", controllerJob},
	} {
		raw, err := os.ReadFile(ref.file)
		if err != nil {
			t.Fatal(err)
		}
		row := regexp.MustCompile("^\\| `(egressd_[a-z0-9_]+)` \\| ([a-z]+) \\| ([^|]*) \\|")
		n := 0
		add := func(name string, labels []string) {
			if prev, ok := out[name]; ok {
				t.Fatalf("%s is in %s and in the reference of job %s: a query could not tell them apart by name", name, ref.file, prev.job)
			}
			out[name] = metric{labels: labels, job: ref.job}
			n++
		}
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
				add(m[1]+"_bucket", append(slices.Clone(labels), "le"))
				add(m[1]+"_sum", labels)
				add(m[1]+"_count", labels)
				continue
			}
			add(m[1], labels)
		}
		if n < 10 {
			t.Fatalf("%d metrics in %s: the table's format changed", n, ref.file)
		}
	}
	return out
}

var (
	selector    = regexp.MustCompile(`\b(egressd_[a-z0-9_]+|up)\b(\{[^}]*\})?`)
	matcherName = regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)`)
	jobMatcher  = regexp.MustCompile(`\bjob\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	grouping    = regexp.MustCompile(`\b(?:by|on|ignoring|without)\s*\(([^)]*)\)`)
	labelValues = regexp.MustCompile(`label_values\(\s*([a-z0-9_]+)\s*,\s*([a-z_]+)\s*\)`)
)

// checkQuery finds what in a PromQL expression the two scrapes cannot give: a metric neither
// process exports; a controller metric read without job="egressd-controller-metrics" (an
// agent of the previous release exported egressd_leader and the EgressIP assignment's series
// itself, and would be counted during the upgrade); a job matcher naming another job than the
// metric's (up: one of the two, by equality); a label a matcher or grouping names that neither
// the expression's metrics nor their scrapes carry (exported_node only where a metric has its
// own node label and its scrape adds node).
func checkQuery(expr string, exported map[string]metric) []error {
	var errs []error
	var known []string
	sels := selector.FindAllStringSubmatch(expr, -1)
	for _, v := range labelValues.FindAllStringSubmatch(expr, -1) {
		sels = append(sels, []string{v[0], v[1], fmt.Sprintf("{%s=\"\"}", v[2])})
	}
	if len(sels) == 0 {
		return []error{fmt.Errorf("%q reads no egressd metric", expr)}
	}
	for _, m := range sels {
		mt, ok := exported[m[1]]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: neither the agent nor the controller exports it", m[1]))
			continue
		}
		jobs := jobMatcher.FindAllStringSubmatch(m[2], -1)
		switch {
		case m[1] == "up":
			if len(jobs) != 1 || jobs[0][1] != "=" || scrapeLabels[jobs[0][2]] == nil {
				errs = append(errs, fmt.Errorf("%s: up of another job than %s or %s", m[0], agentJob, controllerJob))
				known = append(known, "job")
				continue
			}
			mt.job = jobs[0][2]
		case mt.job == controllerJob && (len(jobs) != 1 || jobs[0][1] != "=" || jobs[0][2] != controllerJob):
			errs = append(errs, fmt.Errorf("%s: the controller's metric, read without job=%q", m[0], controllerJob))
		default:
			for _, j := range jobs {
				if j[1] != "=" || j[2] != mt.job {
					errs = append(errs, fmt.Errorf("%s: the metric of job %s, selected by job%s%q", m[0], mt.job, j[1], j[2]))
				}
			}
		}
		scrape := scrapeLabels[mt.job]
		known = append(known, scrape...)
		known = append(known, mt.labels...)
		if slices.Contains(mt.labels, "node") && slices.Contains(scrape, "node") {
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
// every query and variable reads metrics the agent or the controller exports, from its job,
// with the labels they have, and the kustomization ships it as the ConfigMap Grafana's sidecar
// loads.
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
