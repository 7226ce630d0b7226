package kube

import (
	"context"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
)

// InstallLeaseFlowSchema applies the FlowSchema of the manifest at path
// (deploy/controller-flowschema.yaml) for the Leases of namespace ns instead of the deployed
// one, renamed with suffix so that labs on a shared control plane do not meet. Its subject
// stays the deployed controller's ServiceAccount, whose user the labs' controllers are
// (DeployedController). It returns a cleanup.
func InstallLeaseFlowSchema(ctx context.Context, cfg *rest.Config, path, ns, suffix string) (func(), error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	objs, err := Decode(string(raw))
	if err != nil {
		return nil, err
	}
	return createRenamed(ctx, cfg, objs, suffix, func(o *unstructured.Unstructured) error {
		if o.GetKind() != "FlowSchema" {
			return fmt.Errorf("%s holds a %s: want FlowSchemas only", path, o.GetKind())
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "spec", "rules")
		for _, r := range rules {
			for _, rr := range r.(map[string]any)["resourceRules"].([]any) {
				rr.(map[string]any)["namespaces"] = []any{ns}
			}
		}
		return unstructured.SetNestedSlice(o.Object, rules, "spec", "rules")
	})
}
