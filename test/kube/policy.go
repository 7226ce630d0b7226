package kube

import (
	"context"
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// deployedAgent is the agent's ServiceAccount as deploy/ names it.
const deployedAgent = "system:serviceaccount:egressd:egressd"

// InstallAgentPolicies applies the admission policies of the manifest at path
// (deploy/node-policy.yaml, deploy/router-pod-policy.yaml) for user instead of the deployed agent, each policy and binding
// renamed with suffix so that tests on a shared control plane do not meet. It returns a cleanup.
func InstallAgentPolicies(ctx context.Context, cfg *rest.Config, path, user, suffix string) (func(), error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(string(raw), deployedAgent) {
		return nil, fmt.Errorf("%s does not name the agent's ServiceAccount %s", path, deployedAgent)
	}
	objs, err := Decode(strings.ReplaceAll(string(raw), deployedAgent, user))
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
		o.SetName(o.GetName() + "-" + suffix)
		if p, ok := o.Object["spec"].(map[string]any)["policyName"].(string); ok {
			o.Object["spec"].(map[string]any)["policyName"] = p + "-" + suffix
		}
		if _, err := c.Create(ctx, "", o); err != nil {
			return cleanup, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
		created = append(created, func() {
			_ = c.Delete(context.Background(), o.GetAPIVersion(), o.GetKind(), "", o.GetName())
		})
	}
	return cleanup, nil
}

// Impersonate is a client acting as the agent user of ServiceAccount namespace ns, with the
// node-name claim of a pod-bound token for node (none when "").
func Impersonate(cfg *rest.Config, user, ns, node string) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(ImpersonateConfig(cfg, user, ns, node))
}

// ImpersonateConfig is cfg acting as Impersonate's client does, for other clients.
func ImpersonateConfig(cfg *rest.Config, user, ns, node string) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	}
	return cfg
}
