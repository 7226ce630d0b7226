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
	c, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	var created []func()
	cleanup := func() {
		for _, del := range created {
			del()
		}
	}
	for _, o := range objs {
		if o.GetKind() != "FlowSchema" {
			return cleanup, fmt.Errorf("%s holds a %s: want FlowSchemas only", path, o.GetKind())
		}
		o.SetName(o.GetName() + "-" + suffix)
		rules, _, _ := unstructured.NestedSlice(o.Object, "spec", "rules")
		for _, r := range rules {
			for _, rr := range r.(map[string]any)["resourceRules"].([]any) {
				rr.(map[string]any)["namespaces"] = []any{ns}
			}
		}
		if err := unstructured.SetNestedSlice(o.Object, rules, "spec", "rules"); err != nil {
			return cleanup, err
		}
		if _, err := c.Create(ctx, "", o); err != nil {
			return cleanup, fmt.Errorf("FlowSchema %s: %w", o.GetName(), err)
		}
		created = append(created, func() {
			_ = c.Delete(context.Background(), o.GetAPIVersion(), o.GetKind(), "", o.GetName())
		})
	}
	return cleanup, nil
}
