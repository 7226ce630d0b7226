package e2e

import (
	"context"
	"testing"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
)

// agentKubeconfig returns a kubeconfig for user holding the permissions of deploy/rbac.yaml, with
// the leader-election Role in ns.
func agentKubeconfig(t *testing.T, cp *controlplane.ControlPlane, ns, user string) string {
	t.Helper()
	cleanup, err := kube.GrantAgentRBAC(context.Background(), cp.Client(t), "../../deploy/rbac.yaml", ns, user)
	if cleanup != nil {
		t.Cleanup(cleanup)
	}
	if err != nil {
		t.Fatal(err)
	}
	path, err := cp.KubeconfigFor(user)
	if err != nil {
		t.Fatal(err)
	}
	return path
}
