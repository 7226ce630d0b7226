package e2e

import (
	"context"
	"testing"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
)

// agentKubeconfig returns a kubeconfig for user holding the permissions of deploy/rbac.yaml
// (the agent's; it has no Role: ns is kept for the callers that name the egressd namespace).
func agentKubeconfig(t *testing.T, cp *controlplane.ControlPlane, ns, user string) string {
	t.Helper()
	return kubeconfigWithRBAC(t, cp, "../../deploy/rbac.yaml", ns, user)
}

// controllerKubeconfig returns a kubeconfig for user holding the permissions of
// deploy/controller-rbac.yaml, with the leader-election Role in ns.
func controllerKubeconfig(t *testing.T, cp *controlplane.ControlPlane, ns, user string) string {
	t.Helper()
	return kubeconfigWithRBAC(t, cp, "../../deploy/controller-rbac.yaml", ns, user)
}

func kubeconfigWithRBAC(t *testing.T, cp *controlplane.ControlPlane, path, ns, user string) string {
	t.Helper()
	cleanup, err := kube.GrantAgentRBAC(context.Background(), cp.Client(t), path, ns, user)
	if cleanup != nil {
		t.Cleanup(cleanup)
	}
	if err != nil {
		t.Fatal(err)
	}
	path, err = cp.KubeconfigFor(user)
	if err != nil {
		t.Fatal(err)
	}
	return path
}
