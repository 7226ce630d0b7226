package egressip

import (
	"github.com/egressd/egressd/nodeagent/cluster"

	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseHostCIDRs(t *testing.T) {
	got, err := parseHostCIDRs(`["10.0.0.2/24","192.168.5.7/16","fd00::2/64"]`)
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.2/24"), netip.MustParsePrefix("192.168.5.7/16"), netip.MustParsePrefix("fd00::2/64")}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("parseHostCIDRs = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{`["10.0.0.2"]`, `"10.0.0.2/24"`} {
		if _, err := parseHostCIDRs(bad); err == nil {
			t.Errorf("parseHostCIDRs(%s) accepted", bad)
		}
	}
}

func TestNodeFromAPI(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{AssignableLabel: ""},
			Annotations: map[string]string{
				cluster.PrimaryIfAddrAnnotation: `{"ipv4":"10.0.0.2/24"}`,
				cluster.HostCIDRsKey:            `["10.0.0.2/24","172.16.0.9/16"]`,
			}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue},
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.2"},
				{Type: corev1.NodeHostName, Address: "n1"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.9"}},
		},
	}
	got, err := NodeFromAPI(n, true, false)
	want := Node{Name: "n1", Labeled: true, Ready: true, Reachable: true,
		Primary:   cluster.PrimaryIfAddr{V4: netip.MustParsePrefix("10.0.0.2/24")},
		HostCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.2/24"), netip.MustParsePrefix("172.16.0.9/16")},
		Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("203.0.113.9")}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("NodeFromAPI = %+v, %v\nwant %+v", got, err, want)
	}
	if !got.assignable() {
		t.Error("a labeled, Ready, reachable, configured node is not assignable")
	}

	// Unlabeled, not Ready, a broken annotation: the rest is still read, and the error says why.
	n.Labels = nil
	n.Status.Conditions[1].Status = corev1.ConditionFalse
	n.Annotations[cluster.PrimaryIfAddrAnnotation] = `{}`
	got, err = NodeFromAPI(n, true, false)
	if err == nil || got.Labeled || got.Ready || got.configured() || len(got.HostCIDRs) != 2 {
		t.Errorf("NodeFromAPI = %+v, %v", got, err)
	}
}

func TestNodeNetworks(t *testing.T) {
	n := Node{
		Primary: cluster.PrimaryIfAddr{V4: netip.MustParsePrefix("10.0.0.2/24"), V6: netip.MustParsePrefix("fd00::2/64")},
		HostCIDRs: []netip.Prefix{
			netip.MustParsePrefix("10.0.0.2/24"),    // the primary one: never secondary
			netip.MustParsePrefix("10.0.0.7/8"),     // contains the primary subnet
			netip.MustParsePrefix("172.16.0.9/12"),  // shorter
			netip.MustParsePrefix("172.16.5.9/24"),  // longest match for 172.16.5.x
			netip.MustParsePrefix("172.16.5.10/16"), // middle
			netip.MustParsePrefix("169.254.3.3/16"), // link-local address: not a network for egress IPs
			netip.MustParsePrefix("fd00::2/64"),
			netip.MustParsePrefix("2001:db8:1::5/48"),
			netip.MustParsePrefix("2001:db8:1:2::5/64"),
		},
	}
	for _, tc := range []struct {
		ip        string
		primary   bool
		secondary string // "" = none
	}{
		{ip: "10.0.0.50", primary: true, secondary: "10.0.0.0/8"},
		{ip: "10.9.9.9", secondary: "10.0.0.0/8"},
		{ip: "172.16.5.100", secondary: "172.16.5.0/24"},
		{ip: "172.16.6.1", secondary: "172.16.0.0/16"},
		{ip: "172.17.0.1", secondary: "172.16.0.0/12"},
		{ip: "169.254.3.50"},
		{ip: "192.0.2.1"},
		{ip: "fd00::99", primary: true},
		{ip: "2001:db8:1:2::99", secondary: "2001:db8:1:2::/64"},
		{ip: "2001:db8:1:3::99", secondary: "2001:db8:1::/48"},
		{ip: "2001:db8:2::1"},
	} {
		ip := netip.MustParseAddr(tc.ip)
		net, ok := n.secondaryNetwork(ip)
		got := ""
		if ok {
			got = net.String()
		}
		if n.inPrimary(ip) != tc.primary || got != tc.secondary || n.canHost(ip) != (tc.primary || tc.secondary != "") {
			t.Errorf("%s: primary %v secondary %q canHost %v; want primary %v secondary %q",
				tc.ip, n.inPrimary(ip), got, n.canHost(ip), tc.primary, tc.secondary)
		}
	}
}

func TestNodeFromAPICloud(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{AssignableLabel: ""},
		Annotations: map[string]string{
			cluster.PrimaryIfAddrAnnotation: `{"ipv4":"10.0.128.5/18"}`,
			// As the CNCC writes it on AWS: one entry, the ENI, its subnets, per-family capacity.
			CloudConfigAnnotation: `[{"interface":"eni-0123","ifaddr":{"ipv4":"10.0.128.0/18","ipv6":"2600:1f18::/64"},"capacity":{"ipv4":14,"ipv6":15}}]`,
		}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	got, err := NodeFromAPI(n, true, true)
	want := &CloudConfig{Interface: "eni-0123", V4: netip.MustParsePrefix("10.0.128.0/18"), V6: netip.MustParsePrefix("2600:1f18::/64"),
		Capacity: Capacity{IP: unlimited, IPv4: 14, IPv6: 15}}
	if err != nil || !reflect.DeepEqual(got.Cloud, want) || !got.assignable() {
		t.Fatalf("NodeFromAPI(cloud) = %+v, %v; want cloud %+v, assignable", got.Cloud, err, want)
	}
	if !got.canHost(netip.MustParseAddr("10.0.130.9")) || got.canHost(netip.MustParseAddr("10.0.0.9")) {
		t.Error("in cloud mode only the cloud subnets host egress IPs")
	}
	// Not in cloud mode, the annotation is not read.
	if got, _ := NodeFromAPI(n, true, false); got.Cloud != nil {
		t.Errorf("bare metal node has cloud config %+v", got.Cloud)
	}
	// In cloud mode, a node the CNCC has not annotated yet hosts nothing (upstream keeps it out
	// of its allocator); a broken annotation likewise, with an error.
	delete(n.Annotations, CloudConfigAnnotation)
	if got, err := NodeFromAPI(n, true, true); err != nil || got.configured() {
		t.Errorf("node without the cloud annotation: configured %v, err %v", got.configured(), err)
	}
	n.Annotations[CloudConfigAnnotation] = `[]`
	if got, err := NodeFromAPI(n, true, true); err == nil || got.configured() {
		t.Errorf("empty cloud annotation: configured %v, err %v", got.configured(), err)
	}
}

func TestParseCloudConfig(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    CloudConfig
		wantErr string
	}{
		{in: `[{"interface":"nic0","ifaddr":{"ipv4":"10.0.0.0/24"},"capacity":{"ip":3}}]`,
			want: CloudConfig{Interface: "nic0", V4: netip.MustParsePrefix("10.0.0.0/24"), Capacity: Capacity{IP: 3, IPv4: unlimited, IPv6: unlimited}}},
		{in: `[{"interface":"nic0","ifaddr":{"ipv4":"10.0.0.7/24"}}]`, // unmasked: the subnet counts
			want: CloudConfig{Interface: "nic0", V4: netip.MustParsePrefix("10.0.0.0/24"), Capacity: Capacity{IP: unlimited, IPv4: unlimited, IPv6: unlimited}}},
		{in: `[]`, wantErr: "empty annotation"},
		{in: `{}`, wantErr: "failed to unmarshal"},
		{in: `[{"ifaddr":{"ipv4":"fd00::/64"}}]`, wantErr: "not an address of its family"},
		{in: `[{"ifaddr":{"ipv6":"nonsense"}}]`, wantErr: "nonsense"},
	} {
		got, err := ParseCloudConfig(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseCloudConfig(%s) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseCloudConfig(%s) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}
