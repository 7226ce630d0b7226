package nft

import (
	"net"
	"net/netip"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/internal/golden"
)

var (
	addr   = netip.MustParseAddr
	prefix = netip.MustParsePrefix
	eipA   = dataplane.Origin{Kind: "EgressIP", Name: "eip-a"}
	eipB   = dataplane.Origin{Kind: "EgressIP", Name: "eip-b"}
)

func denyOf(ns string, rule int, pod, backend string, proto uint8, port uint16) dataplane.BackendDeny {
	return dataplane.BackendDeny{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: ns, Name: "default", Rule: rule},
		Pod: addr(pod), Backend: addr(backend), Protocol: proto, Port: port}
}

func dscpOf(rule int, pod, backend string, proto uint8, port uint16, dscp uint8) dataplane.BackendDSCP {
	return dataplane.BackendDSCP{Origin: dataplane.Origin{Kind: "EgressQoS", Namespace: "a", Name: "default", Rule: rule},
		Pod: addr(pod), Backend: addr(backend), Protocol: proto, Port: port, DSCP: dscp}
}

// planStates are representative states, one feature each, for the golden files
// testdata/plan-<name>.golden.
var planStates = []struct {
	name string
	s    dataplane.NftablesState
}{
	// Nothing wanted: every set empty, no chain on any hook.
	{"empty", dataplane.NftablesState{SteerMask: 0x00ff0000}},
	// EgressFirewall after DNAT, IPv4 and IPv6, several protocols and ports (a denied CIDR is
	// compiled into its backend addresses by the node agent).
	{"firewall", dataplane.NftablesState{BackendDenies: []dataplane.BackendDeny{
		denyOf("a", 1, "10.244.0.5", "203.0.113.10", 6, 80),
		denyOf("a", 1, "10.244.0.5", "203.0.113.10", 17, 53),
		denyOf("a", 2, "10.244.0.6", "198.51.100.7", 6, 443),
		denyOf("b", 0, "fd00:10:244::5", "2001:db8::10", 132, 9),
	}}},
	// Service frontends under the firewall: the frontend chain is used only when both the
	// firewalled pods and the frontends have elements.
	{"frontends", dataplane.NftablesState{
		Frontends: []dataplane.Frontend{{Addr: addr("10.96.0.80"), Port: dataplane.Port{Protocol: 6, Port: 80}},
			{Addr: addr("10.96.0.53"), Port: dataplane.Port{Protocol: 17, Port: 53}},
			{Addr: addr("fd00:96::80"), Port: dataplane.Port{Protocol: 6, Port: 8080}}},
		FirewalledPods: []netip.Addr{addr("10.244.0.7"), addr("fd00:10:244::7")},
	}},
	// Frontends without a firewalled pod: nothing to judge, no chain.
	{"frontends-unjudged", dataplane.NftablesState{
		Frontends: []dataplane.Frontend{{Addr: addr("10.96.0.80"), Port: dataplane.Port{Protocol: 6, Port: 80}}},
	}},
	// EgressQoS after DNAT: one chain per DSCP value in use; a DSCP past 63 and a pod and
	// backend of two families are left out.
	{"qos", dataplane.NftablesState{BackendDSCP: []dataplane.BackendDSCP{
		dscpOf(0, "10.244.0.5", "198.51.100.20", 6, 443, 46),
		dscpOf(1, "10.244.0.6", "198.51.100.20", 6, 443, 10),
		dscpOf(0, "fd00:10:244::5", "2001:db8::20", 17, 53, 46),
		dscpOf(2, "10.244.0.7", "198.51.100.20", 6, 443, 64),
		dscpOf(3, "10.244.0.8", "2001:db8::20", 6, 443, 8),
	}}},
	// EgressIP on its egress node: SNAT per pod (one failing for its family, one SNATed twice),
	// exempt and remote networks merged into intervals, guarded and spread pods, where steered
	// packets may leave, and IPv6 egress IPs on a secondary network with their table's mark.
	{"egressip", dataplane.NftablesState{
		SteerMask: 0x00ff0000,
		SNAT: []dataplane.SNAT{
			{Origin: eipA, Pod: addr("10.244.0.5"), To: addr("192.0.2.100")},
			{Origin: eipA, Pod: addr("10.244.1.7"), To: addr("192.0.2.100")},
			{Origin: eipA, Pod: addr("fd00:10:244::5"), To: addr("2001:db8:0:1::100")},
			{Origin: eipB, Pod: addr("10.244.0.5"), To: addr("192.0.2.101")},
			{Origin: dataplane.Origin{Kind: "EgressIP", Name: "eip-c"}, Pod: addr("10.244.0.9"), To: addr("2001:db8:0:1::100")},
		},
		Exempt: []netip.Prefix{prefix("10.244.0.0/16"), prefix("10.96.0.0/12"), prefix("10.245.0.0/16"),
			prefix("192.0.2.1/32"), prefix("192.0.2.2/32"), prefix("192.0.2.3/32"),
			prefix("fd00:10:244::/56"), prefix("2001:db8:0:1::1/128")},
		Guarded:    []netip.Addr{addr("10.244.0.5"), addr("10.244.0.6"), addr("10.244.1.7"), addr("fd00:10:244::5")},
		Spread:     []netip.Addr{addr("10.244.0.6")},
		RemotePods: []netip.Prefix{prefix("10.244.1.0/24"), prefix("10.244.2.0/24"), prefix("fd00:10:244:0:1::/80")},
		SteerNexthops: []dataplane.SteerNexthop{{Mark: 0x10000, Nexthop: addr("192.0.2.2")},
			{Mark: 0x10000, Nexthop: addr("2001:db8:0:1::2")}, {Mark: 0x1, Nexthop: addr("192.0.2.9")}},
		SteerDevices:   []string{dataplane.TunnelDevice, "", "a-name-longer-than-15"},
		Secondary:      []netip.Addr{addr("2001:db8:abcd::106"), addr("198.51.100.106")},
		SecondaryMarks: []dataplane.SecondaryMark{{EgressIP: addr("2001:db8:abcd::106"), Mark: 0x30000}, {EgressIP: addr("198.51.100.106"), Mark: 0x40000}},
	}},
	// External gateways' return paths: per gateway a mark and its served pods by the gateway's
	// MAC; a path without a MAC, or with a mark outside the mask, is not programmed, nor a pod
	// of the other family.
	{"returnpaths", dataplane.NftablesState{
		SteerMask: 0x00ff0000,
		ReturnPaths: []dataplane.ReturnPath{
			{Origin: dataplane.Origin{Kind: "AdminPolicyBasedExternalRoute", Name: "gw"}, Gateway: addr("192.0.2.50"), Mark: 0x50000,
				Pods: []netip.Addr{addr("10.244.0.5"), addr("10.244.0.6"), addr("fd00:10:244::5")}, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0x50}},
			{Origin: dataplane.Origin{Kind: "AdminPolicyBasedExternalRoute", Name: "gw"}, Gateway: addr("2001:db8::51"), Mark: 0x60000,
				Pods: []netip.Addr{addr("fd00:10:244::5")}, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0x51}},
			{Origin: dataplane.Origin{Kind: "AdminPolicyBasedExternalRoute", Name: "nomac"}, Gateway: addr("192.0.2.52"), Mark: 0x52000,
				Pods: []netip.Addr{addr("10.244.0.5")}},
			{Origin: dataplane.Origin{Kind: "AdminPolicyBasedExternalRoute", Name: "outside"}, Gateway: addr("192.0.2.53"), Mark: 0x53001,
				Pods: []netip.Addr{addr("10.244.0.5")}, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0x53}},
		},
	}},
	// Steering after DNAT: local pods and other nodes' pods SNATed here, by mark; a mark with
	// bits outside the mask, or none under it, is left out.
	{"steered", dataplane.NftablesState{
		SteerMask: 0x00ff0000,
		Steered: []dataplane.SteeredPod{{Pod: addr("10.244.0.6"), Mark: 0x10000}, {Pod: addr("fd00:10:244::6"), Mark: 0x20000},
			{Pod: addr("10.244.1.9"), Mark: 0x10000, Remote: true}, {Pod: addr("10.244.0.7"), Mark: 0x10001},
			{Pod: addr("10.244.0.8"), Mark: 0x1}},
	}},
	// DNS answers to the pods of namespaces with dnsName rules, from the trusted resolvers.
	{"dnssnoop", dataplane.NftablesState{DNSSnoop: dataplane.DNSSnoop{Queue: 7,
		Pods:      []dataplane.SnoopedPod{{IP: addr("10.244.0.7"), Namespace: "ns"}, {IP: addr("fd00:10:244::5"), Namespace: "ns"}},
		Resolvers: []netip.Addr{addr("10.96.0.10"), addr("fd00:96::a"), addr("::ffff:10.96.0.11")}}}},
	// Resolvers but no pod to snoop for: no element, so no chain and no queue rule.
	{"dnssnoop-no-pods", dataplane.NftablesState{DNSSnoop: dataplane.DNSSnoop{Queue: 7, Resolvers: []netip.Addr{addr("10.96.0.10")}}}},
}

// TestPlanGolden: what Apply writes into the sets for each representative state, the chains
// its verdict maps need, the base chains in use, and the objects it cannot program.
func TestPlanGolden(t *testing.T) {
	for _, tc := range planStates {
		t.Run(tc.name, func(t *testing.T) {
			want, _, _, failed := (&Table{}).plan(&tc.s)
			golden.Assert(t, "testdata/plan-"+tc.name+".golden", renderPlan(want, failed))
		})
	}
}

// TestPlanKeepsFailedNamespaces: the written backend denies and DSCP elements of a namespace
// whose EgressFirewall or EgressQoS failed to compile stay (fail closed); those of the others
// follow the state.
func TestPlanKeepsFailedNamespaces(t *testing.T) {
	prev := &Table{denies: map[string]dataplane.BackendDeny{}, dscp: map[string]dataplane.BackendDSCP{}}
	for _, d := range []dataplane.BackendDeny{denyOf("broken", 0, "10.244.0.5", "203.0.113.10", 6, 80),
		denyOf("fine", 0, "10.244.0.6", "203.0.113.10", 6, 80)} {
		prev.denies[string(denyKey(d))] = d
	}
	for _, d := range []dataplane.BackendDSCP{dscpOf(0, "10.244.0.5", "198.51.100.20", 6, 443, 46)} {
		prev.dscp[string(backendKey(d.Pod, d.Backend, d.Protocol, d.Port))] = d
	}
	for _, tc := range []struct {
		name string
		s    dataplane.NftablesState
	}{
		{"failed", dataplane.NftablesState{KeepBackendDenies: []string{"broken"}, KeepBackendDSCP: []string{"a"},
			BackendDenies: []dataplane.BackendDeny{denyOf("new", 0, "10.244.0.7", "203.0.113.11", 17, 53)}}},
		{"compiled", dataplane.NftablesState{
			BackendDenies: []dataplane.BackendDeny{denyOf("new", 0, "10.244.0.7", "203.0.113.11", 17, 53)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, _, _, failed := prev.plan(&tc.s)
			golden.Assert(t, "testdata/plan-keep-"+tc.name+".golden", renderPlan(want, failed))
		})
	}
}
