package main

import (
	"context"
	"fmt"
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
				MatchingPrecedence:         100, // before the suggested service-accounts schema (9000)
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

// dispatched is the API server's count of the requests of FlowSchema flow so far.
func dispatched(ctx context.Context, c kubernetes.Interface, flow string) (float64, error) {
	body, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "apiserver_flowcontrol_dispatched_requests_total{") && strings.Contains(line, `flow_schema="`+flow+`"`) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				return 0, err
			}
			total += v
		}
	}
	return total, nil
}

// watchedByAgents are what an agent's informers watch, none filtered (watchers/watchers.go):
// every change of one of them is an event to every agent.
var watchedByAgents = []schema.GroupVersionResource{
	{Version: "v1", Resource: "nodes"}, {Version: "v1", Resource: "namespaces"}, {Version: "v1", Resource: "pods"},
	{Version: "v1", Resource: "services"}, {Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
	{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs"},
	{Group: "k8s.ovn.org", Version: "v1", Resource: "egressfirewalls"}, {Group: "k8s.ovn.org", Version: "v1", Resource: "egressqoses"},
	{Group: "k8s.ovn.org", Version: "v1", Resource: "egressips"}, {Group: "k8s.ovn.org", Version: "v1", Resource: "adminpolicybasedexternalroutes"},
	{Group: "k8s.ovn.org", Version: "v1", Resource: "egressservices"},
	{Group: "network.operator.openshift.io", Version: "v1", Resource: "egressrouters"},
	{Group: "cloud.network.openshift.io", Version: "v1", Resource: "cloudprivateipconfigs"},
}

// countWatchEvents watches what an agent watches, from now until ctx ends, and returns the
// count of events so far: what each agent receives.
func countWatchEvents(ctx context.Context, c metadata.Interface) (func() int64, error) {
	var n atomic.Int64
	for _, gvr := range watchedByAgents {
		list, err := c.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", gvr.Resource, err)
		}
		w, err := c.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			return nil, fmt.Errorf("watch %s: %w", gvr.Resource, err)
		}
		go func() {
			defer w.Stop()
			for range w.ResultChan() {
				n.Add(1)
			}
		}()
	}
	return n.Load, nil
}
