package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
	"github.com/egressd/egressd/test/poll"
)

// leaseName is the Lease the controller's replicas compete for: the name the previous
// release's agents competed for, so that during an upgrade an old leading agent and a new
// controller never decide at once. A contract of the manifests, hence a literal here.
const leaseName = "egressd-leader"

// call is one API request as RBAC sees it: a resource's, or, with path, a non-resource URL's
// (e.g. get /metrics).
type call struct {
	verb, group, resource, sub, ns, name string
	path                                 string
}

func (c call) String() string {
	if c.path != "" {
		return c.verb + " " + c.path
	}
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

const ovnGroup, netopGroup, cloudGroup, leaseGroup, egressdGroup = "k8s.ovn.org", "network.operator.openshift.io", "cloud.network.openshift.io", "coordination.k8s.io", "egressd.io"

// metricsGuardCalls are the reviews of the metrics guard both processes run (--metrics-auth,
// internal/httpauth): who a scrape's token is, and whether that user may get the path.
func metricsGuardCalls() []call {
	return []call{
		{verb: "create", group: "authentication.k8s.io", resource: "tokenreviews"},
		{verb: "create", group: "authorization.k8s.io", resource: "subjectaccessreviews"},
	}
}

// Non-resource calls on the processes' metrics ports. Profiles are never granted with the
// metrics: they need a grant of their own.
var (
	getMetrics  = call{verb: "get", path: "/metrics"}
	getProfiles = []call{
		{verb: "get", path: "/debug/pprof/"},
		{verb: "get", path: "/debug/pprof/profile"},
		{verb: "get", path: "/debug/pprof/heap"},
	}
)

// informerCalls are the lists and watches of the informers both processes run
// (watchers/watchers.go).
func informerCalls() []call {
	var calls []call
	for _, r := range []struct{ group, resource string }{
		{"", "nodes"}, {"", "namespaces"}, {"", "pods"}, {"", "services"},
		{"discovery.k8s.io", "endpointslices"}, {"networking.k8s.io", "servicecidrs"},
		{ovnGroup, "egressfirewalls"}, {ovnGroup, "egressqoses"}, {ovnGroup, "egressips"},
		{ovnGroup, "adminpolicybasedexternalroutes"}, {ovnGroup, "egressservices"},
		{netopGroup, "egressrouters"}, {cloudGroup, "cloudprivateipconfigs"},
	} {
		calls = append(calls, call{verb: "list", group: r.group, resource: r.resource}, call{verb: "watch", group: r.group, resource: r.resource})
	}
	return calls
}

// neverCalls are what neither process may do, ns being the processes' namespace.
func neverCalls(ns string) []call {
	return []call{
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
		{verb: "delete", group: ovnGroup, resource: "egressips", name: "eip"},
		{verb: "create", group: ovnGroup, resource: "egressips"},
		{verb: "update", group: ovnGroup, resource: "egressips", name: "eip"},
		{verb: "update", group: ovnGroup, resource: "egressfirewalls", ns: "app", name: "default"},
		// Status is written by server-side apply (patch), never replaced.
		{verb: "update", group: ovnGroup, resource: "egressfirewalls", sub: "status", ns: "app", name: "default"},
		{verb: "update", group: ovnGroup, resource: "egressqoses", sub: "status", ns: "app", name: "default"},
		{verb: "update", group: ovnGroup, resource: "adminpolicybasedexternalroutes", sub: "status", name: "r"},
		{verb: "update", group: ovnGroup, resource: "egressservices", ns: "app", name: "s"},
		// The status is the cloud-network-config-controller's.
		{verb: "update", group: cloudGroup, resource: "cloudprivateipconfigs", sub: "status", name: "192.0.2.10"},
		{verb: "patch", group: cloudGroup, resource: "cloudprivateipconfigs", sub: "status", name: "192.0.2.10"},
		{verb: "update", group: netopGroup, resource: "egressrouters", ns: "app", name: "r"},
		{verb: "delete", group: netopGroup, resource: "egressrouters", ns: "app", name: "r"},
		{verb: "create", group: netopGroup, resource: "egressrouters", ns: "app"},
		{verb: "delete", resource: "events", ns: "app", name: "e"},
		{verb: "update", group: leaseGroup, resource: "leases", ns: ns, name: "someone-else"},
		{verb: "update", group: leaseGroup, resource: "leases", ns: "kube-system", name: leaseName},
		{verb: "create", group: leaseGroup, resource: "leases", ns: "kube-system"},
		{verb: "escalate", group: "rbac.authorization.k8s.io", resource: "clusterroles", name: "egressd"},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"},
	}
}

// TestDeployRBAC asks the real API server whether each process's ServiceAccount, holding
// exactly what its manifest grants (deploy/rbac.yaml for the agent, deploy/controller-rbac.yaml
// for the controller), may make each call the process makes, and may not make those it must
// not: each has enough and no more. The agent, in particular, may make none of the controller's
// cluster-wide writes: a stolen agent token hurts one node, not the cluster.
func TestDeployRBAC(t *testing.T) {
	cp := controlplane.Shared(t)
	ns := cp.Namespace(t) // stands for the namespace egressd (the controller's Lease)

	t.Run("agent", func(t *testing.T) {
		allowed := append(informerCalls(),
			// A pod the CNI plugin announces before the informer has it (nodeagent/cniserver).
			call{verb: "get", resource: "pods", ns: "app", name: "p"},
			// EgressRouter: the node's condition about the router pod it hosts
			// (nodeagent/egressrouter/conditions.go).
			call{verb: "get", group: netopGroup, resource: "egressrouters", ns: "app", name: "r"},
			call{verb: "patch", group: netopGroup, resource: "egressrouters", sub: "status", ns: "app", name: "r"},
			// The node's NodeReport by server-side apply, which creates it the first time
			// (nodeagent/status/report.go); deploy/nodereport-policy.yaml keeps it to its own.
			call{verb: "create", group: egressdGroup, resource: "nodereports"},
			call{verb: "patch", group: egressdGroup, resource: "nodereports", name: "node-a"},
			// Node annotations (nodeagent/status/nodeannotations.go).
			call{verb: "patch", resource: "nodes", name: "node-a"},
			// Events (client-go's recorder), in any object's namespace.
			call{verb: "create", resource: "events", ns: "app"},
			call{verb: "patch", resource: "events", ns: "app", name: "e"},
			// egressctl, run in the agent's pod, reads the agent's metrics with the pod's
			// token (cmd/egressctl/metrics.go).
			getMetrics,
			// Its own DaemonSet, by name: its deletion takes egressd-cni out of the chain
			// (cmd/egressd/unchain.go).
			call{verb: "list", group: "apps", resource: "daemonsets", ns: ns, name: "egressd"},
			call{verb: "watch", group: "apps", resource: "daemonsets", ns: ns, name: "egressd"},
		)
		allowed = append(allowed, metricsGuardCalls()...)
		denied := append(neverCalls(ns),
			// Only its own DaemonSet, and only to follow it.
			call{verb: "list", group: "apps", resource: "daemonsets", ns: ns},
			call{verb: "watch", group: "apps", resource: "daemonsets", ns: ns, name: "other"},
			call{verb: "get", group: "apps", resource: "daemonsets", ns: ns, name: "egressd"},
			call{verb: "delete", group: "apps", resource: "daemonsets", ns: ns, name: "egressd"},
			// The controller's: router pods, the Lease, EgressIP assignment, cloud requests,
			// EgressService hosts.
			call{verb: "create", resource: "pods", ns: "app"},
			call{verb: "delete", resource: "pods", ns: "app", name: "router-x"},
			call{verb: "create", group: leaseGroup, resource: "leases", ns: ns},
			call{verb: "get", group: leaseGroup, resource: "leases", ns: ns, name: leaseName},
			call{verb: "update", group: leaseGroup, resource: "leases", ns: ns, name: leaseName},
			call{verb: "get", group: ovnGroup, resource: "egressips", name: "eip"},
			call{verb: "patch", group: ovnGroup, resource: "egressips", name: "eip"},
			call{verb: "create", group: cloudGroup, resource: "cloudprivateipconfigs"},
			call{verb: "get", group: cloudGroup, resource: "cloudprivateipconfigs", name: "192.0.2.10"},
			call{verb: "update", group: cloudGroup, resource: "cloudprivateipconfigs", name: "192.0.2.10"},
			call{verb: "delete", group: cloudGroup, resource: "cloudprivateipconfigs", name: "192.0.2.10"},
			call{verb: "get", group: ovnGroup, resource: "egressservices", ns: "app", name: "s"},
			call{verb: "update", group: ovnGroup, resource: "egressservices", sub: "status", ns: "app", name: "s"},
			// The status of EgressFirewall, EgressQoS and AdminPolicyBasedExternalRoute is the
			// controller's, written from the NodeReports: an agent writes no entry there.
			call{verb: "patch", group: ovnGroup, resource: "egressfirewalls", sub: "status", ns: "app", name: "default"},
			call{verb: "patch", group: ovnGroup, resource: "egressqoses", sub: "status", ns: "app", name: "default"},
			call{verb: "patch", group: ovnGroup, resource: "adminpolicybasedexternalroutes", sub: "status", name: "r"},
			// The NodeReports: its own it writes by apply alone; it reads none (the controller
			// does) and deletes none (the garbage collector does, with the Node).
			call{verb: "update", group: egressdGroup, resource: "nodereports", name: "node-a"},
			call{verb: "delete", group: egressdGroup, resource: "nodereports", name: "node-b"},
			call{verb: "deletecollection", group: egressdGroup, resource: "nodereports"},
			call{verb: "get", group: egressdGroup, resource: "nodereports", name: "node-b"},
			call{verb: "list", group: egressdGroup, resource: "nodereports"},
			call{verb: "watch", group: egressdGroup, resource: "nodereports"},
		)
		denied = append(denied, getProfiles...)
		checkRBAC(t, cp, "../../deploy/rbac.yaml", ns, "system:serviceaccount:"+ns+":egressd", allowed, denied)
		// The informer's real list of its own DaemonSet, by a field selector the API server
		// turns into the name RBAC's resourceNames match.
		agent, err := kubernetes.NewForConfig(kube.ImpersonateConfig(cp.Config, "system:serviceaccount:"+ns+":egressd", ns, ""))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := agent.AppsV1().DaemonSets(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "metadata.name=egressd"}); err != nil {
			t.Errorf("the agent listing its own DaemonSet by name: %v", err)
		}
		if _, err := agent.AppsV1().DaemonSets(ns).List(context.Background(), metav1.ListOptions{}); err == nil {
			t.Error("the agent listed every DaemonSet of its namespace")
		}
	})

	t.Run("controller", func(t *testing.T) {
		allowed := append(informerCalls(),
			// Leader election (client-go's LeaseLock).
			call{verb: "create", group: leaseGroup, resource: "leases", ns: ns},
			call{verb: "get", group: leaseGroup, resource: "leases", ns: ns, name: leaseName},
			call{verb: "update", group: leaseGroup, resource: "leases", ns: ns, name: leaseName},
			// EgressIP assignment: a merge patch of status.items (nodeagent/egressip/controller.go).
			call{verb: "get", group: ovnGroup, resource: "egressips", name: "eip"},
			call{verb: "patch", group: ovnGroup, resource: "egressips", name: "eip"},
			// Cloud requests, specs only (nodeagent/cloudprivateip/requester.go).
			call{verb: "create", group: cloudGroup, resource: "cloudprivateipconfigs"},
			call{verb: "get", group: cloudGroup, resource: "cloudprivateipconfigs", name: "192.0.2.10"},
			call{verb: "update", group: cloudGroup, resource: "cloudprivateipconfigs", name: "192.0.2.10"},
			call{verb: "delete", group: cloudGroup, resource: "cloudprivateipconfigs", name: "192.0.2.10"},
			// EgressService host election (nodeagent/egressservice/controller.go).
			call{verb: "get", group: ovnGroup, resource: "egressservices", ns: "app", name: "s"},
			call{verb: "update", group: ovnGroup, resource: "egressservices", sub: "status", ns: "app", name: "s"},
			// EgressRouter: router pods and the placement conditions (nodeagent/egressrouter).
			call{verb: "get", resource: "pods", ns: "app", name: "router-x"},
			call{verb: "create", resource: "pods", ns: "app"},
			call{verb: "delete", resource: "pods", ns: "app", name: "router-x"},
			call{verb: "get", group: netopGroup, resource: "egressrouters", ns: "app", name: "r"},
			call{verb: "patch", group: netopGroup, resource: "egressrouters", sub: "status", ns: "app", name: "r"},
			// The nodes' NodeReports, from which the leader writes every status
			// (nodeagent/status/aggregate.go).
			call{verb: "list", group: egressdGroup, resource: "nodereports"},
			call{verb: "watch", group: egressdGroup, resource: "nodereports"},
			// The status of each object, and the removal of what nodes' field managers wrote
			// there, by server-side apply (nodeagent/status/aggregate.go).
			call{verb: "patch", group: ovnGroup, resource: "egressfirewalls", sub: "status", ns: "app", name: "default"},
			call{verb: "patch", group: ovnGroup, resource: "egressqoses", sub: "status", ns: "app", name: "default"},
			call{verb: "patch", group: ovnGroup, resource: "adminpolicybasedexternalroutes", sub: "status", name: "r"},
			// The EgressService hosts' labels.
			call{verb: "patch", resource: "nodes", name: "node-a"},
			call{verb: "create", resource: "events", ns: "app"},
			call{verb: "patch", resource: "events", ns: "app", name: "e"},
		)
		allowed = append(allowed, metricsGuardCalls()...)
		// Nothing reads metrics with the controller's token.
		denied := append(append(neverCalls(ns), getMetrics), getProfiles...)
		// The NodeReports are the agents' to write: the controller only reads them.
		denied = append(denied,
			call{verb: "get", group: egressdGroup, resource: "nodereports", name: "node-a"},
			call{verb: "create", group: egressdGroup, resource: "nodereports"},
			call{verb: "patch", group: egressdGroup, resource: "nodereports", name: "node-a"},
			call{verb: "update", group: egressdGroup, resource: "nodereports", name: "node-a"},
			call{verb: "delete", group: egressdGroup, resource: "nodereports", name: "node-a"},
			call{verb: "deletecollection", group: egressdGroup, resource: "nodereports"},
		)
		checkRBAC(t, cp, "../../deploy/controller-rbac.yaml", ns, "system:serviceaccount:"+ns+":egressd-controller", allowed, denied)
	})

	// The ClusterRole egressd-metrics-reader, for Prometheus: the metrics and nothing else, not
	// the profiles, not a review (it serves no guard), no API object.
	t.Run("metrics-reader", func(t *testing.T) {
		denied := append(append(neverCalls(ns), getProfiles...), metricsGuardCalls()...)
		denied = append(denied,
			call{verb: "list", resource: "pods"},
			call{verb: "get", resource: "nodes", sub: "metrics", name: "node-a"},
			call{verb: "get", path: "/debug/pprof/cmdline"},
		)
		checkRBAC(t, cp, "../../deploy/metrics-reader.yaml", ns, "system:serviceaccount:"+ns+":prometheus", []call{getMetrics}, denied)
	})
}

// checkRBAC grants user the RBAC of the manifest at path (its Role in ns) and asks the API
// server, by SubjectAccessReview, that user may make every allowed call and none of denied.
func checkRBAC(t *testing.T, cp *controlplane.ControlPlane, path, ns, user string, allowed, denied []call) {
	t.Helper()
	client := cp.Client(t)
	ctx := context.Background()
	cleanup, err := kube.GrantAgentRBAC(ctx, client, path, ns, user)
	if cleanup != nil {
		t.Cleanup(cleanup)
	}
	if err != nil {
		t.Fatal(err)
	}
	checkCalls(t, client, user, ns, allowed, denied)
}

// checkCalls asks the API server, by SubjectAccessReview, that the ServiceAccount user of
// namespace ns may make every allowed call and none of denied.
func checkCalls(t *testing.T, client kubernetes.Interface, user, ns string, allowed, denied []call) {
	t.Helper()
	ctx := context.Background()
	// The groups a ServiceAccount's token carries, so that what every authenticated user may do
	// (discovery, self reviews) counts too.
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	may := func(c call) (bool, string) {
		spec := authzv1.SubjectAccessReviewSpec{User: user, Groups: groups}
		if c.path != "" {
			spec.NonResourceAttributes = &authzv1.NonResourceAttributes{Path: c.path, Verb: c.verb}
		} else {
			spec.ResourceAttributes = &authzv1.ResourceAttributes{
				Verb: c.verb, Group: c.group, Resource: c.resource, Subresource: c.sub, Namespace: c.ns, Name: c.name,
			}
		}
		res, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
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
			t.Errorf("%s needs to %s, but may not: %v", user, c, err)
		}
	}
	for _, c := range denied {
		if ok, why := may(c); ok {
			t.Errorf("%s may %s, which it must not (%s)", user, c, why)
		}
	}
}
