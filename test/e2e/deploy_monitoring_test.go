package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
)

// TestDeployMonitoring checks deploy/monitoring against the agent and the controller: every
// egressd_ metric an alert uses is one of theirs, read from its job, with the labels it has
// (checkQuery); each Service selects one process's pods on its metrics port and is scraped by
// exactly one ServiceMonitor; the Services pass a server-side dry run. (The ServiceMonitors and
// the PrometheusRule need the Prometheus Operator's CRDs, absent here.)
func TestDeployMonitoring(t *testing.T) {
	dir := filepath.Join(deployDir, "monitoring")
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, f := range k.Resources {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		o, err := kube.Decode(string(raw))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		objs = append(objs, o...)
	}
	m := byKindName(objs)
	rule := m["PrometheusRule/egressd"]
	if rule == nil {
		t.Fatalf("want PrometheusRule egressd, got %v", objs)
	}

	exported := exportedMetrics(t)
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	alerts := 0
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			r := r.(map[string]any)
			expr, _ := r["expr"].(string)
			if expr == "" || r["alert"] == nil {
				t.Errorf("rule %v: want alert and expr", r)
				continue
			}
			alerts++
			for _, err := range checkQuery(expr, exported) {
				t.Errorf("alert %s: %v", r["alert"], err)
			}
		}
	}
	if alerts < 4 {
		t.Errorf("%d alerts", alerts)
	}

	// Each job's Service (the Prometheus Operator names the job after it) selects its
	// process's pods and targets its metrics port; exactly one ServiceMonitor scrapes it.
	base := byKindName(kustomizeBase(t))
	var monitors []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "ServiceMonitor" {
			monitors = append(monitors, o)
		}
	}
	var services []*unstructured.Unstructured
	for job, workload := range map[string]string{agentJob: "DaemonSet/egressd", controllerJob: "Deployment/egressd-controller"} {
		svc, w := m["Service/"+job], base[workload]
		if svc == nil || w == nil {
			t.Errorf("want Service %s (job %s) and %s in the base", job, job, workload)
			continue
		}
		services = append(services, svc)
		podLabels, _, _ := unstructured.NestedStringMap(w.Object, "spec", "template", "metadata", "labels")
		sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
		if len(sel) == 0 {
			t.Errorf("Service %s selects every pod", job)
		}
		for k, v := range sel {
			if podLabels[k] != v {
				t.Errorf("Service %s selects %s=%s, the pods of %s are labeled %v", job, k, v, workload, podLabels)
			}
		}
		containers, _, _ := unstructured.NestedSlice(w.Object, "spec", "template", "spec", "containers")
		ports := map[string]bool{}
		for _, p := range containers[0].(map[string]any)["ports"].([]any) {
			ports[p.(map[string]any)["name"].(string)] = true
		}
		svcPorts, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		for _, p := range svcPorts {
			if tp := p.(map[string]any)["targetPort"]; !ports[tp.(string)] {
				t.Errorf("Service %s targets port %v, the ports of %s are %v", job, tp, workload, ports)
			}
		}
		var scrapedBy []string
		for _, sm := range monitors {
			smSel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
			matches := len(smSel) > 0
			for k, v := range smSel {
				matches = matches && svc.GetLabels()[k] == v
			}
			if !matches {
				continue
			}
			scrapedBy = append(scrapedBy, sm.GetName())
			// The node label the scrape adds, which checkQuery assumes per job.
			addsNode := false
			endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			for _, e := range endpoints {
				relabelings, _, _ := unstructured.NestedSlice(e.(map[string]any), "relabelings")
				for _, r := range relabelings {
					addsNode = addsNode || r.(map[string]any)["targetLabel"] == "node"
				}
			}
			if want := slices.Contains(scrapeLabels[job], "node"); addsNode != want {
				t.Errorf("ServiceMonitor %s adds a node label: %v, the queries' check assumes %v", sm.GetName(), addsNode, want)
			}
		}
		if len(scrapedBy) != 1 {
			t.Errorf("Service %s is scraped by the ServiceMonitors %v, want one", job, scrapedBy)
		}
	}

	cp := controlplane.Shared(t)
	dryRunApply(t, cp, inNamespace(services, cp.Namespace(t)))
}
