package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
)

// TestDeployMonitoring checks deploy/monitoring against the agent: every egressd_ metric an
// alert uses is one the agent exports, with the labels it has (checkQuery), the Service
// selects the agents' pods on their metrics port, and the Service passes a server-side dry run. (The
// ServiceMonitor and PrometheusRule need the Prometheus Operator's CRDs, absent here.)
func TestDeployMonitoring(t *testing.T) {
	dir := filepath.Join(deployDir, "monitoring")
	var objs []*unstructured.Unstructured
	for _, f := range []string{"service.yaml", "servicemonitor.yaml", "prometheusrule.yaml"} {
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
	svc, sm, rule := m["Service/egressd-metrics"], m["ServiceMonitor/egressd"], m["PrometheusRule/egressd"]
	if svc == nil || sm == nil || rule == nil {
		t.Fatalf("want Service egressd-metrics, ServiceMonitor and PrometheusRule egressd, got %v", objs)
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
			if strings.Contains(expr, "up{") && !strings.Contains(expr, `job="egressd-metrics"`) {
				t.Errorf("alert %s: up of another job than the Service's", r["alert"])
			}
		}
	}
	if alerts < 4 {
		t.Errorf("%d alerts", alerts)
	}

	// The Service selects the DaemonSet's pods and names its metrics port.
	ds := byKindName(kustomizeBase(t))["DaemonSet/egressd"]
	podLabels, _, _ := unstructured.NestedStringMap(ds.Object, "spec", "template", "metadata", "labels")
	sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	for k, v := range sel {
		if podLabels[k] != v {
			t.Errorf("Service selects %s=%s, the agents' pods are labeled %v", k, v, podLabels)
		}
	}
	smSel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range smSel {
		if svc.GetLabels()[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, the Service is labeled %v", k, v, svc.GetLabels())
		}
	}
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	ports := map[string]bool{}
	for _, p := range containers[0].(map[string]any)["ports"].([]any) {
		ports[p.(map[string]any)["name"].(string)] = true
	}
	svcPorts, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	for _, p := range svcPorts {
		if tp := p.(map[string]any)["targetPort"]; !ports[tp.(string)] {
			t.Errorf("Service targets port %v, the agent's ports are %v", tp, ports)
		}
	}

	cp := controlplane.Shared(t)
	dryRunApply(t, cp, inNamespace([]*unstructured.Unstructured{svc}, cp.Namespace(t)))
}
