package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/nodeagent"
	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
	"github.com/egressd/egressd/test/poll"
)

// call is one API request as RBAC sees it.
type call struct {
	verb, group, resource, sub, ns, name string
}

func (c call) String() string {
	r := c.resource
	if c.sub != "" {
		r += "/" + c.sub
	}
	if c.group != "" {
		r += "." + c.group
	}
	s := c.verb + " " + r
	if c.ns != "" {
		s += " in " + c.ns
	}
	if c.name != "" {
		s += " named " + c.name
	}
	return s
}

// TestDeployRBAC asks the real API server whether the agent's ServiceAccount, holding exactly
// what deploy/rbac.yaml grants, may make each call the agent makes, and may not make a few it
// must not: its permissions are enough and no more than needed.
func TestDeployRBAC(t *testing.T) {
	cp := controlplane.Shared(t)
	ns := cp.Namespace(t) // stands for the agents' namespace (leader election)
	client := cp.Client(t)
	ctx := context.Background()
	user := "system:serviceaccount:" + ns + ":egressd"
	cleanup, err := kube.GrantAgentRBAC(ctx, client, "../../deploy/rbac.yaml", ns, user)
	if cleanup != nil {
		t.Cleanup(cleanup)
	}
	if err != nil {
		t.Fatal(err)
	}

	const ovn, netop, cloud = "k8s.ovn.org", "network.operator.openshift.io", "cloud.network.openshift.io"
	var allowed []call
	// Informers (watchers/watchers.go).
	for _, r := range []struct{ group, resource string }{
		{"", "nodes"}, {"", "namespaces"}, {"", "pods"}, {"", "services"},
		{"discovery.k8s.io", "endpointslices"}, {"networking.k8s.io", "servicecidrs"},
		{ovn, "egressfirewalls"}, {ovn, "egressqoses"}, {ovn, "egressips"},
		{ovn, "adminpolicybasedexternalroutes"}, {ovn, "egressservices"},
		{netop, "egressrouters"}, {cloud, "cloudprivateipconfigs"},
	} {
		allowed = append(allowed, call{verb: "list", group: r.group, resource: r.resource}, call{verb: "watch", group: r.group, resource: r.resource})
	}
	allowed = append(allowed,
		// The leader's EgressIP assignment (nodeagent/egressip/controller.go).
		call{verb: "get", group: ovn, resource: "egressips", name: "eip"},
		call{verb: "patch", group: ovn, resource: "egressips", name: "eip"},
		call{verb: "update", group: ovn, resource: "egressips", name: "eip"}, // the previous release's leader
		// The leader's EgressService host election (nodeagent/egressservice/controller.go).
		call{verb: "get", group: ovn, resource: "egressservices", ns: "app", name: "s"},
		call{verb: "update", group: ovn, resource: "egressservices", sub: "status", ns: "app", name: "s"},
		// The leader's cloud requests, specs only (nodeagent/cloudprivateip/requester.go).
		call{verb: "create", group: cloud, resource: "cloudprivateipconfigs"},
		call{verb: "get", group: cloud, resource: "cloudprivateipconfigs", name: "192.0.2.10"},
		call{verb: "update", group: cloud, resource: "cloudprivateipconfigs", name: "192.0.2.10"},
		call{verb: "delete", group: cloud, resource: "cloudprivateipconfigs", name: "192.0.2.10"},
		// A pod the CNI plugin announces before the informer has it (nodeagent/cniserver).
		call{verb: "get", resource: "pods", ns: "app", name: "p"},
		// EgressRouter: router pods (the leader) and the conditions (leader and nodes)
		// (nodeagent/egressrouter).
		call{verb: "create", resource: "pods", ns: "app"},
		call{verb: "delete", resource: "pods", ns: "app", name: "router-x"},
		call{verb: "get", group: netop, resource: "egressrouters", ns: "app", name: "r"},
		call{verb: "patch", group: netop, resource: "egressrouters", sub: "status", ns: "app", name: "r"},
		// Status by server-side apply (nodeagent/status).
		call{verb: "patch", group: ovn, resource: "egressfirewalls", sub: "status", ns: "app", name: "default"},
		call{verb: "patch", group: ovn, resource: "egressqoses", sub: "status", ns: "app", name: "default"},
		call{verb: "patch", group: ovn, resource: "adminpolicybasedexternalroutes", sub: "status", name: "r"},
		// Node annotations (nodeagent/status/nodeannotations.go).
		call{verb: "patch", resource: "nodes", name: "node-a"},
		// Events (client-go's recorder), in any object's namespace.
		call{verb: "create", resource: "events", ns: "app"},
		call{verb: "patch", resource: "events", ns: "app", name: "e"},
		// Leader election (nodeagent/leader.go, client-go's LeaseLock).
		call{verb: "create", group: "coordination.k8s.io", resource: "leases", ns: ns},
		call{verb: "get", group: "coordination.k8s.io", resource: "leases", ns: ns, name: nodeagent.LeaseName},
		call{verb: "update", group: "coordination.k8s.io", resource: "leases", ns: ns, name: nodeagent.LeaseName},
	)
	denied := []call{
		{verb: "delete", resource: "nodes", name: "node-a"},
		{verb: "update", resource: "nodes", name: "node-a"},
		{verb: "patch", resource: "nodes", sub: "status", name: "node-a"},
		{verb: "update", resource: "pods", ns: "app", name: "p"},
		{verb: "patch", resource: "pods", ns: "app", name: "p"},
		{verb: "update", resource: "pods", sub: "status", ns: "app", name: "p"},
		{verb: "create", resource: "pods", sub: "exec", ns: "app", name: "p"},
		{verb: "get", resource: "secrets", ns: "app", name: "s"},
		{verb: "list", resource: "secrets", ns: ns},
		{verb: "get", resource: "configmaps", ns: ns, name: "c"},
		{verb: "delete", group: ovn, resource: "egressips", name: "eip"},
		{verb: "create", group: ovn, resource: "egressips"},
		{verb: "update", group: ovn, resource: "egressfirewalls", ns: "app", name: "default"},
		{verb: "update", group: ovn, resource: "egressservices", ns: "app", name: "s"},
		// The status is the cloud-network-config-controller's.
		{verb: "update", group: cloud, resource: "cloudprivateipconfigs", sub: "status", name: "192.0.2.10"},
		{verb: "patch", group: cloud, resource: "cloudprivateipconfigs", sub: "status", name: "192.0.2.10"},
		{verb: "update", group: netop, resource: "egressrouters", ns: "app", name: "r"},
		{verb: "delete", group: netop, resource: "egressrouters", ns: "app", name: "r"},
		{verb: "create", group: netop, resource: "egressrouters", ns: "app"},
		{verb: "delete", resource: "events", ns: "app", name: "e"},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", ns: ns, name: "someone-else"},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", ns: "kube-system", name: nodeagent.LeaseName},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", ns: "kube-system"},
		{verb: "escalate", group: "rbac.authorization.k8s.io", resource: "clusterroles", name: "egressd"},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"},
	}

	// The groups a ServiceAccount's token carries, so that what every authenticated user may do
	// (discovery, self reviews) counts too.
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	may := func(c call) (bool, string) {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: user, Groups: groups,
			ResourceAttributes: &authzv1.ResourceAttributes{
				Verb: c.verb, Group: c.group, Resource: c.resource, Subresource: c.sub, Namespace: c.ns, Name: c.name,
			},
		}}
		res, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		return res.Status.Allowed, fmt.Sprintf("%s %s", res.Status.Reason, res.Status.EvaluationError)
	}
	// The API server's authorizer learns new bindings from its own informers: an allowed call
	// may be denied for a moment after the grant.
	for _, c := range allowed {
		if err := poll.Until(ctx, c.String(), 10*time.Second, func() error {
			if ok, why := may(c); !ok {
				return fmt.Errorf("denied (%s)", why)
			}
			return nil
		}); err != nil {
			t.Errorf("the agent needs to %s, but may not: %v", c, err)
		}
	}
	for _, c := range denied {
		if ok, why := may(c); ok {
			t.Errorf("the agent may %s, which it must not (%s)", c, why)
		}
	}
}
