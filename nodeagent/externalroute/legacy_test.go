package externalroute

import (
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

func annotated(ns *corev1.Namespace, kv ...string) *corev1.Namespace {
	ns.Annotations = map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		ns.Annotations[kv[i]] = kv[i+1]
	}
	return ns
}

func legacyGW(name, serves, network, status string, bfd bool) *corev1.Pod {
	p := gwPod(name, status)
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[routingNamespacesKey] = serves
	if network != "" {
		p.Annotations[routingNetworkKey] = network
	}
	if bfd {
		p.Annotations[bfdEnabledKey] = ""
	}
	return p
}

func legacyRoute(ns, podName, ip string, gws ...Gateway) Route {
	r := route("", ns, podName, ip, gws...)
	r.Origin = dataplane.Origin{Kind: cluster.KindExternalRoute, Namespace: ns}
	return r
}

func TestLegacyAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name     string
		objs     []runtime.Object
		want     []Route
		warnings []string
	}{
		{name: "namespace gateways with BFD, a gateway pod's network",
			objs: []runtime.Object{annotated(namespace("a", nil), routingExternalGWsKey, "192.0.2.1,192.0.2.1,2001:db8::1", bfdEnabledKey, ""),
				pod("a", "p1", "n1", "10.244.1.5"), legacyGW("g1", "a,b", "foo", fooStatus, false)},
			want: []Route{legacyRoute("a", "p1", "10.244.1.5", gw("172.18.0.5", false), gw("172.18.0.6", false), gw("192.0.2.1", true))}},
		{name: "unparsable annotation: the namespace has none",
			objs:     []runtime.Object{annotated(namespace("a", nil), routingExternalGWsKey, "192.0.2.1, 192.0.2.2"), pod("a", "p1", "n1", "10.244.1.5")},
			warnings: []string{"namespace a: failed to parse external gateway annotation (could not parse routing external gw annotation value  192.0.2.2)"}},
		{name: "missing network: no address, no error",
			objs:     []runtime.Object{namespace("a", nil), pod("a", "p1", "n1", "10.244.1.5"), legacyGW("g1", "a", "bar", fooStatus, false)},
			warnings: []string{"No valid gateway IPs found for requested external gateway pod: g1"}},
		{name: "pod network without routing-network",
			objs:     []runtime.Object{namespace("a", nil), pod("a", "p1", "n1", "10.244.1.5"), legacyGW("g1", "a", "", fooStatus, false)},
			warnings: []string{"Error getting exgw IPs for pod: g1, error: ignoring pod g1 as an external gateway candidate. Invalid combination of host network: false and routing-network annotation: "}},
		{name: "bad network-status",
			objs:     []runtime.Object{namespace("a", nil), pod("a", "p1", "n1", "10.244.1.5"), legacyGW("g1", "a", "foo", "[", false)},
			warnings: []string{"Error getting exgw IPs for pod: g1, error: unable to unmarshall annotation k8s.v1.cni.cncf.io/network-status on pod g1: unexpected end of JSON input"}},
		{name: "the second pod with the same address is refused",
			objs: []runtime.Object{namespace("a", nil), pod("a", "p1", "n1", "10.244.1.5"),
				legacyGW("g1", "a", "foo", fooStatus, true), legacyGW("g2", "a", "foo", `[{"name":"foo","ips":["172.18.0.6","172.18.0.9"]}]`, false)},
			want:     []Route{legacyRoute("a", "p1", "10.244.1.5", gw("172.18.0.5", true), gw("172.18.0.6", true))},
			warnings: []string{`unable to add pod: gws/g2 as external gateway for namespace: a, error: duplicate IP found in ECMP Pod route cache! IP: "172.18.0.6", first pod: "gws_g1", second pod: "gws_g2"`}},
		{name: "family mismatch",
			objs:     []runtime.Object{annotated(namespace("a", nil), routingExternalGWsKey, "2001:db8::1"), pod("a", "p1", "n1", "10.244.1.5")},
			warnings: []string{"gateway specified for namespace a with gateway addresses [10.244.1.5/32] but no valid routes exist for pod: p1"}},
		{name: "merged with a policy: union, the policy's BFD and origin",
			objs: []runtime.Object{annotated(namespace("a", map[string]string{"team": "x"}), routingExternalGWsKey, "192.0.2.1,192.0.2.2"),
				pod("a", "p1", "n1", "10.244.1.5"), policy("pol", "x", 0, "192.0.2.1+bfd")},
			want: []Route{route("pol", "a", "p1", "10.244.1.5", gw("192.0.2.1", true), gw("192.0.2.2", false))}},
	} {
		part := compile(t, &Compiler{Legacy: true}, tc.objs...)
		if !reflect.DeepEqual(part.Routes, tc.want) || !slices.Equal(part.Warnings, tc.warnings) {
			t.Errorf("%s:\n got %+v %q\nwant %+v %q", tc.name, part.Routes, part.Warnings, tc.want, tc.warnings)
		}
		if part := compile(t, &Compiler{}, tc.objs...); slices.ContainsFunc(part.Routes, func(r Route) bool { return r.Origin.Name == "" }) {
			t.Errorf("%s: annotations honoured without Legacy: %+v", tc.name, part.Routes)
		}
	}
}
