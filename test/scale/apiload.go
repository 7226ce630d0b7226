package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
)

// The API server counts the requests of each FlowSchema
// (apiserver_flowcontrol_dispatched_requests_total): one per egressd identity gives the
// requests of the agents (one user for all, as the DaemonSet's ServiceAccount) and of the
// controller apart from everyone else's.
const agentFlow, controllerFlow = "egressd-scale-agents", "egressd-scale-controller"

func flowSchemas(ctx context.Context, c kubernetes.Interface, users map[string]string) error {
	for name, user := range users {
		_, err := c.FlowcontrolV1().FlowSchemas().Create(ctx, &flowcontrolv1.FlowSchema{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: flowcontrolv1.FlowSchemaSpec{
				PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "workload-high"},
				// After egressd's own (the controller's Lease, 250: counted apart, leaseFlow),
				// before the suggested service-accounts schema (9000).
				MatchingPrecedence: 300,
				Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
					Subjects:         []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: user}}},
					ResourceRules:    []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, ClusterScope: true, Namespaces: []string{"*"}}},
					NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
				}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("FlowSchema %s: %w", name, err)
		}
	}
	return nil
}

// leaseFlow names the FlowSchema deploy/controller-flowschema.yaml ships, as the lab renames
// it: the controller's Lease requests, in the leader-election priority level.
const leaseFlow = "egressd-controller-leader-election-"

// dispatched is the API server's count of the requests of the FlowSchemas whose names start
// with one of flows so far.
func dispatched(ctx context.Context, c kubernetes.Interface, flows ...string) (float64, error) {
	body, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "apiserver_flowcontrol_dispatched_requests_total{") && slices.ContainsFunc(flows, func(f string) bool {
			return strings.Contains(line, `flow_schema="`+f)
		}) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				return 0, err
			}
			total += v
		}
	}
	return total, nil
}

// watchedByAgents are what an agent's informers watch unfiltered (watchers/watchers.go):
// every change of one of them is an event to every agent. Pods are watched apart: an agent
// watches its node's, and the pods its node serves (on an egress node, its EgressIPs' pods).
var watchedByAgents = []schema.GroupVersionResource{
	{Version: "v1", Resource: "nodes"}, {Version: "v1", Resource: "namespaces"},
	{Version: "v1", Resource: "services"}, {Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
	{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs"},
	{Group: "k8s.ovn.org", Version: "v1", Resource: "egressfirewalls"}, {Group: "k8s.ovn.org", Version: "v1", Resource: "egressqoses"},
	{Group: "k8s.ovn.org", Version: "v1", Resource: "egressips"}, {Group: "k8s.ovn.org", Version: "v1", Resource: "adminpolicybasedexternalroutes"},
	{Group: "k8s.ovn.org", Version: "v1", Resource: "egressservices"},
	{Group: "network.operator.openshift.io", Version: "v1", Resource: "egressrouters"},
	{Group: "cloud.network.openshift.io", Version: "v1", Resource: "cloudprivateipconfigs"},
}

// countWatchEvents watches what the agent of node watches, from now until ctx ends, and
// returns the count of events so far by resource: what it receives, on a node that serves no
// other node's pods (an egress node also gets its EgressIPs' pods' events).
func countWatchEvents(ctx context.Context, c metadata.Interface, node string) (func() map[string]int64, error) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	type watched struct {
		gvr schema.GroupVersionResource
		lo  metav1.ListOptions
		n   atomic.Int64
	}
	all := []*watched{{gvr: pods, lo: metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}}}
	for _, gvr := range watchedByAgents {
		all = append(all, &watched{gvr: gvr})
	}
	for _, x := range all {
		lo := x.lo
		lo.Limit = 1
		list, err := c.Resource(x.gvr).List(ctx, lo)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", x.gvr.Resource, err)
		}
		lo = x.lo
		lo.ResourceVersion = list.GetResourceVersion()
		w, err := c.Resource(x.gvr).Watch(ctx, lo)
		if err != nil {
			return nil, fmt.Errorf("watch %s: %w", x.gvr.Resource, err)
		}
		go func() {
			defer w.Stop()
			for range w.ResultChan() {
				x.n.Add(1)
			}
		}()
	}
	return func() map[string]int64 {
		out := map[string]int64{}
		for _, x := range all {
			out[x.gvr.Resource] = x.n.Load()
		}
		return out
	}, nil
}

// eventRates is the total rate of seen over secs, then each resource's that had any, largest
// first.
func eventRates(seen map[string]int64, secs float64) string {
	var total int64
	var kinds []string
	for r, n := range seen {
		total += n
		if n > 0 {
			kinds = append(kinds, r)
		}
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(cmp.Compare(seen[b], seen[a]), cmp.Compare(a, b)) })
	out := fmt.Sprintf("%.1f/s", float64(total)/secs)
	if len(kinds) > 0 {
		parts := make([]string, len(kinds))
		for i, r := range kinds {
			parts[i] = fmt.Sprintf("%s %.1f", r, float64(seen[r])/secs)
		}
		out += " (" + strings.Join(parts, ", ") + ")"
	}
	return out
}
