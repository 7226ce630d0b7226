package externalroute

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// dynamicPolicy selects gateway pods app=gw in namespaces role=gw, through network.
func dynamicPolicy(network string, bfd bool) *ovnv1.AdminPolicyBasedExternalRoute {
	p := policy("dyn", "x", 0)
	p.Spec.NextHops.DynamicHops = []*ovnv1.DynamicHop{{
		PodSelector:           metav1.LabelSelector{MatchLabels: map[string]string{"role": "gw"}},
		NamespaceSelector:     metav1.LabelSelector{MatchLabels: map[string]string{"role": "gw"}},
		NetworkAttachmentName: network, BFDEnabled: bfd}}
	return p
}

func gwPod(name, networkStatus string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := pod("gws", name, "n2", "10.244.2.9")
	p.Labels = map[string]string{"role": "gw"}
	if networkStatus != "" {
		p.Annotations = map[string]string{networkStatusKey: networkStatus}
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func hostNetwork(p *corev1.Pod) {
	p.Spec.HostNetwork = true
	p.Status.PodIPs = []corev1.PodIP{{IP: "198.51.100.7"}, {IP: "2001:db8::7"}}
}
func notReady(p *corev1.Pod)    { p.Status.Conditions[0].Status = corev1.ConditionFalse }
func terminating(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }

const fooStatus = `[{"name":"default","interface":"eth0","ips":["10.244.2.9"]},` +
	`{"name":"foo","interface":"net1","ips":["172.18.0.5","bad","172.18.0.6"],"mac":"01:23:45:67:89:10"}]`

func TestDynamicHops(t *testing.T) {
	base := []runtime.Object{namespace("a", map[string]string{"team": "x"}), namespace("gws", map[string]string{"role": "gw"}),
		pod("a", "p1", "n1", "10.244.1.5")}
	for _, tc := range []struct {
		name     string
		network  string
		gws      []*corev1.Pod
		want     []string // gateways of p1
		err      string   // the policy's error
		warnings []string
	}{
		{name: "network-status entry, all its IPs", network: "foo", gws: []*corev1.Pod{gwPod("g1", fooStatus)},
			want: []string{"172.18.0.5", "172.18.0.6"}},
		{name: "host network pod IPs", gws: []*corev1.Pod{gwPod("g1", "", hostNetwork)}, want: []string{"198.51.100.7"}},
		{name: "not ready skipped", network: "foo", gws: []*corev1.Pod{gwPod("g1", fooStatus, notReady), gwPod("g2", `[{"name":"foo","ips":["172.18.0.8"]}]`)},
			want: []string{"172.18.0.8"}, warnings: []string{"External gateway pod cannot serve traffic; it's in terminating or not ready state: gws/g1"}},
		{name: "terminating skipped, even when invalid", gws: []*corev1.Pod{gwPod("g1", "", terminating)},
			warnings: []string{"External gateway pod cannot serve traffic; it's in terminating or not ready state: gws/g1"}},
		{name: "entry without IPs", network: "foo", gws: []*corev1.Pod{gwPod("g1", `[{"name":"foo"}]`)},
			warnings: []string{"No valid gateway IPs found for requested external gateway pod gws/g1"}},
		{name: "missing network", network: "bar", gws: []*corev1.Pod{gwPod("g1", fooStatus)},
			err: "failed to build updated policy: failed to process dynamic GW: failed to get external GW pod ips: unable to find multus network bar in pod gws/g1"},
		{name: "no annotation", network: "foo", gws: []*corev1.Pod{gwPod("g1", "")},
			err: "failed to build updated policy: failed to process dynamic GW: failed to get external GW pod ips: unable to unmarshall annotation on pod g1 k8s.v1.cni.cncf.io/network-status '': unexpected end of JSON input"},
		{name: "bad JSON", network: "foo", gws: []*corev1.Pod{gwPod("g1", `{"name":"foo"}`)},
			err: "failed to build updated policy: failed to process dynamic GW: failed to get external GW pod ips: unable to unmarshall annotation on pod g1 k8s.v1.cni.cncf.io/network-status '{\"name\":\"foo\"}': json: cannot unmarshal"},
		{name: "pod network without attachment name", gws: []*corev1.Pod{gwPod("g1", fooStatus)},
			err: "failed to build updated policy: failed to process dynamic GW: failed to get external GW pod ips: ignoring pod g1 as an external gateway candidate. Invalid combination of host network: false and routing-network annotation: "},
	} {
		objs := append(slices.Clone(base), dynamicPolicy(tc.network, true))
		for _, g := range tc.gws {
			objs = append(objs, g)
		}
		part := compile(t, &Compiler{}, objs...)
		err := fmtErr(policyErr(part, "dyn"))
		if tc.err == "" && err != "" || !strings.HasPrefix(err, tc.err) {
			t.Errorf("%s: error %q, want %q", tc.name, err, tc.err)
		}
		var got []string
		for _, r := range part.Routes {
			for _, g := range r.Gateways {
				got = append(got, g.IP.String())
				if !g.BFD {
					t.Errorf("%s: %s lost BFD", tc.name, g.IP)
				}
			}
		}
		if !slices.Equal(got, tc.want) || !slices.Equal(part.Warnings, tc.warnings) {
			t.Errorf("%s: gateways %v warnings %q, want %v %q", tc.name, got, part.Warnings, tc.want, tc.warnings)
		}
	}
}

// ConfiguredGateways lists static and dynamic gateways, of every family, for the status.
func TestConfiguredGateways(t *testing.T) {
	p := dynamicPolicy("", false)
	p.Spec.NextHops.StaticHops = []*ovnv1.StaticHop{{IP: "192.0.2.10"}, {IP: "192.0.2.9"}}
	snap := watcherstest.Snapshot(p, namespace("gws", map[string]string{"role": "gw"}), gwPod("g1", "", hostNetwork))
	got, err := ConfiguredGateways(snap, "dyn")
	want := []netip.Addr{netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("192.0.2.10"),
		netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::7")}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("%v %v, want %v", got, err, want)
	}
	if _, err := ConfiguredGateways(snap, "missing"); err == nil {
		t.Error("a missing policy has gateways")
	}
}
