package kube

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The ServiceAccounts' users as deploy/ names them.
const (
	// DeployedAgent is the agent's (the DaemonSet's) user.
	DeployedAgent = "system:serviceaccount:egressd:egressd"
	// DeployedController is the controller's (the Deployment's) user.
	DeployedController = "system:serviceaccount:egressd:egressd-controller"
)

// serviceAccountUser matches a whole ServiceAccount user name, so that one user is never
// replaced inside a longer one (the agent's is a prefix of the controller's).
var serviceAccountUser = regexp.MustCompile(`system:serviceaccount:[a-z0-9.-]+:[a-z0-9.-]+`)

// replaceUsers replaces in doc every ServiceAccount user that is a key of users by its value,
// whole names only; named says whether doc held any.
func replaceUsers(doc string, users map[string]string) (out string, named bool) {
	out = serviceAccountUser.ReplaceAllStringFunc(doc, func(u string) string {
		if to, ok := users[u]; ok {
			named = true
			return to
		}
		return u
	})
	return out, named
}

// InstallAgentPolicies applies the admission policies of the manifest at path
// (deploy/node-policy.yaml, deploy/nodereport-policy.yaml) for user instead of the deployed agent,
// each policy and binding renamed with suffix so that tests on a shared control plane do not
// meet. It is InstallPolicies with the agent's user alone: the file must name it. It returns a
// cleanup.
func InstallAgentPolicies(ctx context.Context, cfg *rest.Config, path, user, suffix string) (func(), error) {
	return InstallPolicies(ctx, cfg, path, map[string]string{DeployedAgent: user}, suffix)
}

// InstallPolicies applies the admission policies of the manifest at path (deploy/node-policy.yaml,
// deploy/nodereport-policy.yaml, deploy/router-pod-policy.yaml) with each deployed user that is a key
// of users (DeployedAgent, DeployedController) replaced by its value, each policy and binding
// renamed with suffix so that tests on a shared control plane do not meet. A user the map does
// not name stays as deployed. The file must name at least one of the users. It returns a
// cleanup.
func InstallPolicies(ctx context.Context, cfg *rest.Config, path string, users map[string]string, suffix string) (func(), error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	doc, named := replaceUsers(string(raw), users)
	if !named {
		deployed := make([]string, 0, len(users))
		for u := range users {
			deployed = append(deployed, u)
		}
		sort.Strings(deployed)
		return nil, fmt.Errorf("%s names none of the ServiceAccounts %s", path, strings.Join(deployed, ", "))
	}
	objs, err := Decode(doc)
	if err != nil {
		return nil, err
	}
	return createRenamed(ctx, cfg, objs, suffix, func(o *unstructured.Unstructured) error {
		if p, ok := o.Object["spec"].(map[string]any)["policyName"].(string); ok {
			o.Object["spec"].(map[string]any)["policyName"] = p + "-" + suffix
		}
		return nil
	})
}

// createRenamed creates the cluster-scoped objs, each renamed with suffix and then changed by
// adjust, and returns a cleanup that deletes those it created.
func createRenamed(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured, suffix string, adjust func(*unstructured.Unstructured) error) (func(), error) {
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
		if err := adjust(o); err != nil {
			return cleanup, err
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
