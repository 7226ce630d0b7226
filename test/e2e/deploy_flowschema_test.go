package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
	"github.com/egressd/egressd/test/poll"
)

// TestDeployControllerLeaseFlowSchema: with deploy/controller-flowschema.yaml, the real API
// server's priority and fairness puts the controller's Lease requests in the leader-election
// priority level, and leaves its other requests, and the agents' Lease requests, in
// workload-low with every ServiceAccount's. The API server names the level of each request
// in the response header X-Kubernetes-PF-PriorityLevel-UID (also of a request it then refuses).
func TestDeployControllerLeaseFlowSchema(t *testing.T) {
	cp := controlplane.Shared(t)
	ns := cp.Namespace(t)
	ctx := context.Background()
	remove, err := kube.InstallLeaseFlowSchema(ctx, cp.Config, filepath.Join(deployDir, "controller-flowschema.yaml"), ns, ns)
	if remove != nil {
		t.Cleanup(remove)
	}
	if err != nil {
		t.Fatal(err)
	}
	levels := map[string]string{} // UID -> name
	for _, name := range []string{"leader-election", "workload-low"} {
		poll.Eventually(t, "the API server's suggested priority level "+name, 30*time.Second, func() error {
			pl, err := cp.Client(t).FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				levels[string(pl.UID)] = name
			}
			return err
		})
	}
	level := func(user, path string) string {
		t.Helper()
		// The groups a ServiceAccount's token carries: the suggested FlowSchema service-accounts
		// matches them.
		kubeconfig, err := cp.KubeconfigFor(user, "system:serviceaccounts", "system:serviceaccounts:egressd")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Get(cfg.Host + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		uid := resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")
		if name, ok := levels[uid]; ok {
			return name
		}
		return "level " + uid + " (" + http.StatusText(resp.StatusCode) + ")"
	}
	lease := "/apis/coordination.k8s.io/v1/namespaces/" + ns + "/leases/egressd-leader"
	// The API server's priority and fairness takes a new FlowSchema up from its informer.
	poll.Eventually(t, "the controller's Lease requests in leader-election", 30*time.Second, func() error {
		if got := level(kube.DeployedController, lease); got != "leader-election" {
			return fmt.Errorf("priority level %s", got)
		}
		return nil
	})
	for _, c := range []struct{ who, user, path, want string }{
		{"the controller's Lease", kube.DeployedController, lease, "leader-election"},
		{"the controller's list of pods", kube.DeployedController, "/api/v1/namespaces/" + ns + "/pods", "workload-low"},
		{"the controller's Lease in another namespace", kube.DeployedController, "/apis/coordination.k8s.io/v1/namespaces/default/leases/egressd-leader", "workload-low"},
		{"an agent's look at the Lease", kube.DeployedAgent, lease, "workload-low"},
	} {
		if got := level(c.user, c.path); got != c.want {
			t.Errorf("%s: priority level %s, want %s", c.who, got, c.want)
		}
	}
}
