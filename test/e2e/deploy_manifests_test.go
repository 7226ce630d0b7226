package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	cachedmemory "k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
)

const (
	deployDir = "../../deploy"
	chartDir  = "../../deploy/helm/egressd"
	// helmModule builds helm when none is installed (no change to go.mod).
	helmModule = "helm.sh/helm/v3/cmd/helm@v3.22.0"
)

// kustomizeBase is what `kubectl kustomize deploy` outputs: the base only lists resources,
// with no transformers, so its output is those files' objects, in order.
func kustomizeBase(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	var all map[string]any
	if err := yaml.Unmarshal(raw, &all); err != nil {
		t.Fatal(err)
	}
	for key := range all {
		if key != "apiVersion" && key != "kind" && key != "resources" {
			t.Fatalf("kustomization.yaml uses %q: this test only reads a plain resource list; build it with kustomize (krusty) instead", key)
		}
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range k.Resources {
		doc, err := os.ReadFile(filepath.Join(deployDir, r))
		if err != nil {
			t.Fatal(err)
		}
		o, err := kube.Decode(string(doc))
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		objs = append(objs, o...)
	}
	return objs
}

// helmBinary is helm from $HELM, $PATH or $GOPATH/bin; failing those, `go run` builds it.
func helmBinary(t *testing.T) []string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return []string{h}
	}
	if h, err := exec.LookPath("helm"); err == nil {
		return []string{h}
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		if h := filepath.Join(strings.TrimSpace(string(out)), "bin", "helm"); fileExists(h) {
			return []string{h}
		}
	}
	return []string{"go", "run", helmModule}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// helmTemplate renders the chart as `helm template` does.
func helmTemplate(t *testing.T, release, ns string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	cmdline := append(helmBinary(t), append([]string{"template", release, chartDir, "--namespace", ns, "--include-crds", "--kube-version", "1.34.0"}, args...)...)
	cmd := exec.Command(cmdline[0], cmdline[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmdline, " "), err, stderr.String())
	}
	objs, err := kube.Decode(string(out))
	if err != nil {
		t.Fatalf("helm template output: %v", err)
	}
	return objs
}

// dryRunApply applies every object with server-side apply and dryRun=All: the API server
// validates and admits them (schema, DaemonSet pod spec, RBAC escalation) without storing.
func dryRunApply(t *testing.T, cp *controlplane.ControlPlane, objs []*unstructured.Unstructured) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cachedmemory.NewMemCacheClient(disc))
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s %s: %v", gvk.Kind, o.GetName(), err)
			continue
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		if _, err := ri.Apply(context.Background(), o.GetName(), o, metav1.ApplyOptions{FieldManager: "egressd-deploy-test", DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("%s %s/%s: %v", gvk.Kind, o.GetNamespace(), o.GetName(), err)
		}
	}
}

// inNamespace moves the objects of the agents' namespace "egressd" to ns (what kustomize's
// namespace: field does): the namespace must exist for a dry run of the objects in it.
func inNamespace(objs []*unstructured.Unstructured, ns string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		o = o.DeepCopy()
		if o.GetKind() == "Namespace" {
			out = append(out, o) // dry run of the Namespace itself
			continue
		}
		if o.GetNamespace() == "egressd" {
			o.SetNamespace(ns)
		}
		if subjects, ok, _ := unstructured.NestedSlice(o.Object, "subjects"); ok {
			for _, s := range subjects {
				if m, ok := s.(map[string]any); ok && m["namespace"] == "egressd" {
					m["namespace"] = ns
				}
			}
			_ = unstructured.SetNestedSlice(o.Object, subjects, "subjects")
		}
		out = append(out, o)
	}
	return out
}

func byKindName(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		m[o.GetKind()+"/"+o.GetName()] = o
	}
	return m
}

// TestDeployManifestsDryRun applies the kustomize base and the Helm chart (default values, and
// every value set) to the real API server with server-side dry-run: both are valid and
// admitted as they are.
func TestDeployManifestsDryRun(t *testing.T) {
	cp := controlplane.Shared(t)
	t.Run("kustomize", func(t *testing.T) {
		ns := cp.Namespace(t)
		objs := kustomizeBase(t)
		if len(objs) < 10 {
			t.Fatalf("kustomize base: %d objects", len(objs))
		}
		dryRunApply(t, cp, inNamespace(objs, ns))
	})
	t.Run("helm-defaults", func(t *testing.T) {
		ns := cp.Namespace(t)
		dryRunApply(t, cp, helmTemplate(t, "egressd", ns))
	})
	t.Run("helm-values", func(t *testing.T) {
		ns := cp.Namespace(t)
		objs := helmTemplate(t, "edge", ns, "--set", strings.Join([]string{
			"image.repository=registry.example/egressd", "image.tag=v1.2.3", "image.pullPolicy=IfNotPresent",
			"clusterCIDR=10.0.0.0/16\\,fd00::/48", "serviceCIDR=10.1.0.0/16",
			"fwmarkMask=0x0f000000", "routing.rulePriorityBase=2000", "routing.rulePriorityCount=100",
			"routing.routeTableBase=3000", "routing.routeTableCount=200",
			"ports.metrics=19476", "ports.metricsHost=node", "ports.health=19477", "ports.egressHealth=19107",
			"logFormat=text", "verbosity=1", "extraArgs[0]=--external-gateway-annotations",
			"tolerations[0].key=dedicated", "tolerations[0].operator=Exists", "tolerations[0].effect=NoSchedule",
			"nodeSelector.kubernetes\\.io/os=linux", "resources.limits.memory=512Mi",
			"seccompProfile.type=Unconfined", "podAnnotations.a=b", "createNamespace=false",
			"controller.replicas=3", "controller.ports.metrics=19478", "controller.ports.health=19479",
			"controller.extraArgs[0]=--egressip-cloud=false", "controller.nodeSelector.kubernetes\\.io/os=linux",
			"controller.resources.limits.memory=512Mi", "controller.podAnnotations.a=b", "controller.priorityClassName=",
			"controller.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=node-role.kubernetes.io/control-plane",
			"controller.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
		}, ","))
		containerArgs := func(kind, name string) string {
			t.Helper()
			o := byKindName(objs)[kind+"/"+name]
			if o == nil {
				t.Fatalf("no %s %s in %d objects", kind, name, len(objs))
			}
			c, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			return fmt.Sprint(c[0].(map[string]any)["args"])
		}
		args := containerArgs("DaemonSet", "edge-egressd")
		for _, want := range []string{"--cluster-cidr=10.0.0.0/16,fd00::/48", "--service-cidr=10.1.0.0/16", "--fwmark-mask=0x0f000000", "--rule-priority-base=2000", "--rule-priority-count=100",
			"--route-table-base=3000", "--route-table-count=200", "--metrics-bind-address=$(HOST_IP):19476",
			"--health-probe-bind-address=:19477", "--egress-health-bind-address=:19107", "--egressip-health-port=19107",
			"--log-format=text", "--v=1", "--external-gateway-annotations"} {
			if !strings.Contains(args, want) {
				t.Errorf("the agent's args %s lack %s", args, want)
			}
		}
		// metricsHost=node: the node's address, from the pod's status, is what $(HOST_IP) expands to.
		ds := byKindName(objs)["DaemonSet/edge-egressd"]
		containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
		if env := fmt.Sprint(containers[0].(map[string]any)["env"]); !strings.Contains(env, "HOST_IP") || !strings.Contains(env, "status.hostIP") {
			t.Errorf("the agent's env %s lacks HOST_IP from status.hostIP", env)
		}
		// The router pods are the controller's: their image is its flag.
		if strings.Contains(args, "--egress-router-image") {
			t.Errorf("the agent's args %s hold --egress-router-image", args)
		}
		args = containerArgs("Deployment", "edge-egressd-controller")
		if !strings.HasPrefix(args, "[controller ") {
			t.Errorf("the controller's args %s do not start with the subcommand controller", args)
		}
		for _, want := range []string{"--egress-router-image=registry.example/egressd:v1.2.3", "--cluster-cidr=10.0.0.0/16,fd00::/48", "--service-cidr=10.1.0.0/16", "--metrics-bind-address=:19478",
			"--health-probe-bind-address=:19479", "--egressip-health-port=19107", "--log-format=text", "--v=1", "--egressip-cloud=false"} {
			if !strings.Contains(args, want) {
				t.Errorf("the controller's args %s lack %s", args, want)
			}
		}
		for _, unwanted := range []string{"--external-gateway-annotations", "--fwmark-mask", "--egress-health-bind-address"} {
			if strings.Contains(args, unwanted) {
				t.Errorf("the controller's args %s hold the agent's %s", args, unwanted)
			}
		}
		if d := byKindName(objs)["Deployment/edge-egressd-controller"]; d != nil {
			if r, _, _ := unstructured.NestedFieldNoCopy(d.Object, "spec", "replicas"); fmt.Sprint(r) != "3" {
				t.Errorf("the controller's replicas: %v, want 3", r)
			}
		}
		if byKindName(objs)["PodDisruptionBudget/edge-egressd-controller"] == nil {
			t.Errorf("no PodDisruptionBudget for 3 controller replicas")
		}
		dryRunApply(t, cp, objs)
	})
	t.Run("helm-no-flowschema", func(t *testing.T) {
		// The cluster's own priority and fairness configuration decides.
		objs := helmTemplate(t, "egressd", cp.Namespace(t), "--set", "controller.leaseFlowSchema=false")
		if fs := byKindName(objs)["FlowSchema/egressd-controller-leader-election"]; fs != nil {
			t.Errorf("a FlowSchema with controller.leaseFlowSchema=false")
		}
	})
	t.Run("helm-one-controller", func(t *testing.T) {
		// A single replica has no PodDisruptionBudget: minAvailable 1 would block every drain.
		objs := helmTemplate(t, "egressd", cp.Namespace(t), "--set", "controller.replicas=1")
		if pdb := byKindName(objs)["PodDisruptionBudget/egressd-controller"]; pdb != nil {
			t.Errorf("a PodDisruptionBudget for one controller replica")
		}
	})
}

// TestDeployChartMatchesKustomize: with default values the chart renders the objects of the
// kustomize base (but the Namespace, which helm --create-namespace makes): same CRDs, same
// RBAC rules, same pod spec. A change to one that is not made to the other fails here.
func TestDeployChartMatchesKustomize(t *testing.T) {
	base := byKindName(kustomizeBase(t))
	chart := byKindName(helmTemplate(t, "egressd", "egressd"))
	delete(base, "Namespace/egressd")
	for k := range base {
		if chart[k] == nil {
			t.Errorf("the chart lacks %s", k)
		}
	}
	for k := range chart {
		if base[k] == nil {
			t.Errorf("the chart renders %s, which the kustomize base lacks", k)
		}
	}
	norm := func(v any) string {
		b, _ := json.Marshal(v)
		var x any
		_ = json.Unmarshal(b, &x)
		b, _ = json.MarshalIndent(x, "", " ")
		return string(b)
	}
	for k, b := range base {
		c := chart[k]
		if c == nil {
			continue
		}
		var fields [][]string
		switch b.GetKind() {
		case "CustomResourceDefinition":
			fields = [][]string{{"spec"}}
		case "ClusterRole", "Role":
			fields = [][]string{{"rules"}}
		case "ClusterRoleBinding", "RoleBinding":
			fields = [][]string{{"roleRef"}, {"subjects"}}
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			fields = [][]string{{"spec"}}
		case "DaemonSet":
			fields = [][]string{{"spec", "selector"}, {"spec", "updateStrategy"}, {"spec", "template"}}
		case "Deployment":
			fields = [][]string{{"spec", "replicas"}, {"spec", "selector"}, {"spec", "strategy"}, {"spec", "template"}}
		case "PodDisruptionBudget", "FlowSchema":
			fields = [][]string{{"spec"}}
		case "ServiceAccount":
		default:
			t.Errorf("%s: this test does not know which fields of a %s to compare", k, b.GetKind())
		}
		if b.GetNamespace() != c.GetNamespace() {
			t.Errorf("%s: namespace %q in the base, %q in the chart", k, b.GetNamespace(), c.GetNamespace())
		}
		for _, f := range fields {
			bv, _, _ := unstructured.NestedFieldNoCopy(b.Object, f...)
			cv, _, _ := unstructured.NestedFieldNoCopy(c.Object, f...)
			if !reflect.DeepEqual(norm(bv), norm(cv)) {
				t.Errorf("%s %s differs:\nbase:  %s\nchart: %s", k, strings.Join(f, "."), norm(bv), norm(cv))
			}
		}
	}
}
