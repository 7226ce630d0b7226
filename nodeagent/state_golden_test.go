package nodeagent

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/internal/golden"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// stateJSON renders a desired state for golden files.
func stateJSON(t *testing.T, s dataplane.State) string {
	t.Helper()
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func pod(ns, name, node string, labels map[string]string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

func node(name, primary string, podCIDRs ...string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{cluster.PrimaryIfAddrAnnotation: primary}},
		Spec: corev1.NodeSpec{PodCIDRs: podCIDRs}}
}

// TestDesiredStateGolden: what one sync hands the dataplane for whole scenarios, through every
// feature's compile and the merge (-update rewrites testdata/*.golden).
func TestDesiredStateGolden(t *testing.T) {
	cidr := "203.0.113.0/24"
	eip := &ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "eip"}, Spec: ovnv1.EgressIPSpec{
		EgressIPs:         []ovnv1.IPAddress{"192.0.2.100", "192.0.2.101", "2001:db8::100"},
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
		PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
	}, Status: ovnv1.EgressIPStatus{Items: []ovnv1.EgressIPStatusItem{
		{Node: "n2", EgressIP: "192.0.2.100"}, {Node: "n3", EgressIP: "192.0.2.101"}, {Node: "n1", EgressIP: "2001:db8::100"}}}}
	common := []runtime.Object{
		node("n1", `{"ipv4":"192.0.2.1/24","ipv6":"2001:db8::1/64"}`, "10.244.1.0/24", "fd00:10:244:1::/64"),
		node("n2", `{"ipv4":"192.0.2.2/24"}`, "10.244.2.0/24", "fd00:10:244:2::/64"), node("n3", `{"ipv4":"192.0.2.3/24"}`, "10.244.3.0/24"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"team": "a"}}},
		pod("a", "x1", "n1", map[string]string{"app": "x"}, "10.244.1.5", "fd00:10:244:1::5"),
		pod("a", "x2", "n2", map[string]string{"app": "x"}, "10.244.2.5"),
		pod("a", "web", "n1", map[string]string{"app": "web"}, "10.244.1.6"),
	}
	// The same pods served by an egress IP of n1 outside its primary network (a secondary host
	// network): x1 (local) and x2 (of n2) are SNATed here and leave by the table copying the
	// routes of the interface that holds the IP.
	secondary := &ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "eip"}, Spec: eip.Spec,
		Status: ovnv1.EgressIPStatus{Items: []ovnv1.EgressIPStatusItem{{Node: "n1", EgressIP: "198.51.100.100"}}}}
	secondary.Spec.EgressIPs = []ovnv1.IPAddress{"198.51.100.100"}
	// One object, two paths of one slot: IPv4 SNATed here on the secondary network (x1, and x2
	// of n2), IPv6 steered to n5 (x1): one table, the copy of the interface for IPv4, a route
	// to n5 for IPv6.
	split := secondary.DeepCopy()
	split.Spec.EgressIPs = append(split.Spec.EgressIPs, "2001:db8::105")
	split.Status.Items = append(split.Status.Items, ovnv1.EgressIPStatusItem{Node: "n5", EgressIP: "2001:db8::105"})
	cloudNode := node("n4", `{"ipv4":"192.0.2.4/24"}`)
	cloudNode.Annotations[egressip.CloudConfigAnnotation] = `[{"interface":"eni-4","ifaddr":{"ipv4":"192.0.2.0/24"},"capacity":{"ipv4":14}}]`
	const pathsHelp = "# HELP egressd_steered_path_pod_addresses Pod addresses steered through the path of an object (EgressIP, AdminPolicyBasedExternalRoute, EgressService), by the skb->mark that selects its ip rules and table: local pods, and for an egress IP of this node on a secondary host network every pod SNATed to it (its table copies the routes of the IP's interface); kind ExternalGateway is a gateway's return path, whose mark only the replies of connections it brought carry, and kind RemotePodReplies the path back to their nodes of the replies to other nodes' pods SNATed here (both 0 pod addresses).\n# TYPE egressd_steered_path_pod_addresses gauge\n"
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		// paths is the expected SteeredPaths metric.
		paths string
	}{
		{"firewall-qos", []runtime.Object{
			&ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "default", UID: "f"}, Spec: ovnv1.EgressFirewallSpec{Egress: []ovnv1.EgressFirewallRule{
				{Type: "Allow", To: ovnv1.EgressFirewallDestination{CIDRSelector: cidr}, Ports: []ovnv1.EgressFirewallPort{{Protocol: "TCP", Port: 443}}},
				{Type: "Deny", To: ovnv1.EgressFirewallDestination{CIDRSelector: "0.0.0.0/0"}}}}},
			&ovnv1.EgressQoS{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "default"}, Spec: ovnv1.EgressQoSSpec{Egress: []ovnv1.EgressQoSRule{
				{DSCP: 46, DstCIDR: &cidr, PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}},
			// Its external IP's port 80 is judged after DNAT, by the backend.
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "web"}, Spec: corev1.ServiceSpec{ClusterIPs: []string{"10.96.0.80"},
				ExternalIPs: []string{"203.0.113.80"}, Ports: []corev1.ServicePort{{Port: 80}}}},
		}, ""},
		// x1 on n1: IPv4 steered to n2 and n3 (ECMP), IPv6 SNATed here; x2 (on n2) SNATed here
		// only over IPv6, which it does not have.
		{"egressip", []runtime.Object{eip}, pathsHelp + `egressd_steered_path_pod_addresses{kind="EgressIP",mark="0x10000",object="eip"} 1` + "\n"},
		{"egressip-secondary", []runtime.Object{secondary}, pathsHelp + `egressd_steered_path_pod_addresses{kind="EgressIP",mark="0x10000",object="eip"} 2` + "\n" +
			`egressd_steered_path_pod_addresses{kind="RemotePodReplies",mark="0x20000",object="n1"} 0` + "\n"},
		{"egressip-secondary-split", []runtime.Object{split, node("n5", `{"ipv6":"2001:db8::5/64"}`)},
			pathsHelp + `egressd_steered_path_pod_addresses{kind="EgressIP",mark="0x10000",object="eip"} 3` + "\n" +
				`egressd_steered_path_pod_addresses{kind="RemotePodReplies",mark="0x20000",object="n1"} 0` + "\n"},
		// The same in a cloud (a node carries the CNCC's annotation): steering takes the
		// tunnel even to egress nodes of this node's subnet.
		{"egressip-cloud", []runtime.Object{eip, cloudNode}, pathsHelp + `egressd_steered_path_pod_addresses{kind="EgressIP",mark="0x10000",object="eip"} 1` + "\n"},
		// The pods of namespace a leave through two gateways (ECMP; one BFD gated), IPv4 and
		// IPv6; x1's IPv4 takes its EgressIP's path instead (EgressIP wins, as upstream).
		{"externalroute", []runtime.Object{&ovnv1.AdminPolicyBasedExternalRoute{ObjectMeta: metav1.ObjectMeta{Name: "gws"},
			Spec: ovnv1.ExternalRouteSpec{
				From: ovnv1.ExternalNetworkSource{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
				NextHops: ovnv1.ExternalNextHops{StaticHops: []*ovnv1.StaticHop{
					{IP: "198.51.100.1", BFDEnabled: true}, {IP: "198.51.100.2"}, {IP: "2001:db8:1::1"}}}}}, eip},
			pathsHelp + `egressd_steered_path_pod_addresses{kind="AdminPolicyBasedExternalRoute",mark="0x10000",object="gws"} 2` + "\n" +
				`egressd_steered_path_pod_addresses{kind="EgressIP",mark="0x20000",object="eip"} 1` + "\n" +
				`egressd_steered_path_pod_addresses{kind="ExternalGateway",mark="0x30000",object="198.51.100.1"} 0` + "\n" +
				`egressd_steered_path_pod_addresses{kind="ExternalGateway",mark="0x40000",object="198.51.100.2"} 0` + "\n" +
				`egressd_steered_path_pod_addresses{kind="ExternalGateway",mark="0x50000",object="2001:db8:1::1"} 0` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := &recordingApplier{}
			l := newLoop(app, nil, 0, func(c *Config, d *Deps) {
				c.Node = "n1"
				c.Networks.Pods = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")}
				d.Snapshot = watcherstest.Snapshot(append(append([]runtime.Object{}, common...), tc.objs...)...)
			})
			l.sync(context.Background())
			golden.Assert(t, "testdata/"+tc.name+".golden", stateJSON(t, app.state()))
			if err := testutil.CollectAndCompare(l.deps.Metrics.SteeredPaths, strings.NewReader(tc.paths)); err != nil {
				t.Error(err)
			}
		})
	}
}
