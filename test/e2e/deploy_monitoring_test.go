package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
)

// TestDeployMonitoring checks deploy/monitoring against the agent and the controller: every
// egressd_ metric an alert uses is one of theirs, read from its job, with the labels it has
// (checkQuery); each Service selects one process's pods on its metrics port and is scraped by
// exactly one ServiceMonitor, over http with Prometheus' ServiceAccount token (both processes
// guard /metrics, --metrics-auth); the ClusterRoleBinding lets that ServiceAccount get /metrics
// (the base's egressd-metrics-reader, asked of the API server) and nothing more; the Services
// and the binding pass a server-side dry run. (The ServiceMonitors and the PrometheusRule need
// the Prometheus Operator's CRDs, absent here.)
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
			for _, e := range endpoints {
				if err := checkScrapeAuth(e.(map[string]any)); err != nil {
					t.Errorf("ServiceMonitor %s: %v", sm.GetName(), err)
				}
			}
		}
		if len(scrapedBy) != 1 {
			t.Errorf("Service %s is scraped by the ServiceMonitors %v, want one", job, scrapedBy)
		}
	}

	cp := controlplane.Shared(t)
	ns := cp.Namespace(t)
	var bindings []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "ClusterRoleBinding" {
			bindings = append(bindings, o)
		}
	}
	if len(bindings) != 1 {
		t.Fatalf("want one ClusterRoleBinding (Prometheus' ServiceAccount to egressd-metrics-reader), got %d", len(bindings))
	}
	checkReaderBinding(t, cp, bindings[0], base, ns)
	dryRunApply(t, cp, append(inNamespace(services, ns), bindings...))
}

// saTokenPath is where a pod's ServiceAccount token is mounted: Prometheus' own, sent by the
// ServiceMonitors.
const saTokenPath = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// checkScrapeAuth: a ServiceMonitor endpoint scrapes egressd's plain http with a bearer token:
// Prometheus' own (bearerTokenFile), or a Secret's (authorization, for a Prometheus that denies
// ServiceMonitors its files).
func checkScrapeAuth(e map[string]any) error {
	if scheme, _ := e["scheme"].(string); scheme != "" && scheme != "http" {
		return fmt.Errorf("endpoint %v: scheme %q, but egressd serves its metrics over http", e["port"], scheme)
	}
	file, _ := e["bearerTokenFile"].(string)
	secret, _, _ := unstructured.NestedString(e, "authorization", "credentials", "name")
	if file != saTokenPath && secret == "" {
		return fmt.Errorf("endpoint %v sends no token (bearerTokenFile %q, authorization %v): egressd answers a scrape without one 401 (--metrics-auth)", e["port"], file, e["authorization"])
	}
	return nil
}

// checkReaderBinding: the monitoring ClusterRoleBinding binds the base's metrics reader role to
// a ServiceAccount, which then, by the API server's word, may get /metrics, and not the
// profiles nor any API object. The role is the base's, as applied; the binding is made for
// the ServiceAccount moved into ns.
func checkReaderBinding(t *testing.T, cp *controlplane.ControlPlane, b *unstructured.Unstructured, base map[string]*unstructured.Unstructured, ns string) {
	t.Helper()
	var crb rbacv1.ClusterRoleBinding
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(b.Object, &crb); err != nil {
		t.Fatal(err)
	}
	role := base["ClusterRole/"+crb.RoleRef.Name]
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != "egressd-metrics-reader" || role == nil {
		t.Fatalf("ClusterRoleBinding %s binds %s %s, want the base's ClusterRole egressd-metrics-reader", crb.Name, crb.RoleRef.Kind, crb.RoleRef.Name)
	}
	if len(crb.Subjects) != 1 || crb.Subjects[0].Kind != rbacv1.ServiceAccountKind {
		t.Fatalf("ClusterRoleBinding %s: subjects %v, want Prometheus' ServiceAccount", crb.Name, crb.Subjects)
	}
	var cr rbacv1.ClusterRole
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(role.Object, &cr); err != nil {
		t.Fatal(err)
	}
	client := cp.Client(t)
	ctx := context.Background()
	// Others (TestDeployRBAC) may have created the same role from the same file.
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, &cr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sa := crb.Subjects[0].Name
	crb.Name += "-" + ns
	crb.Subjects[0].Namespace = ns
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
	denied := append(append(neverCalls(ns), getProfiles...), call{verb: "list", resource: "pods"})
	checkCalls(t, client, "system:serviceaccount:"+ns+":"+sa, ns, []call{getMetrics}, denied)
}
