package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/kernel"
	"github.com/egressd/egressd/dataplane/rpfilter"
	"github.com/egressd/egressd/nodeagent"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
	"github.com/egressd/egressd/watchers/dnsnames"
)

// The node of these tests: pod a/pa (10.244.0.5) steered by the mark of EgressIP eip through
// 192.0.2.2 and SNATed here to its egress IP; pod b/pb (10.244.0.6) steered by the mark of
// external route policy gws over gateways 192.0.2.2 and 192.0.2.4, and 192.0.2.3 whose BFD
// session never comes up; 10.244.2.5 of another node, SNATed here; 10.244.2.7 of another node,
// selected by an EgressIP but not served here (guarded); pod c/pc (10.244.0.7), an endpoint of
// EgressService svc whose network is table 100 (routed by source: the classifier has nothing
// for it).
var (
	podA, podB  = netip.MustParseAddr("10.244.0.5"), netip.MustParseAddr("10.244.0.6")
	podC        = netip.MustParseAddr("10.244.0.7")
	remote      = netip.MustParseAddr("10.244.2.5")
	guarded     = netip.MustParseAddr("10.244.2.7")
	egressAddr  = netip.MustParseAddr("192.0.2.100")
	gw2, gw3    = netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")
	gw4         = netip.MustParseAddr("192.0.2.4")
	eipOrigin   = dataplane.Origin{Kind: "EgressIP", Name: "eip"}
	routeOrigin = dataplane.Origin{Kind: "AdminPolicyBasedExternalRoute", Name: "gws"}
)

const markA, markB = 0x10000, 0x20000

func nodeState() *dataplane.State {
	p := netip.MustParsePrefix
	cluster := []netip.Prefix{p("10.244.0.0/16"), p("10.96.0.0/12")}
	exempt := append(append([]netip.Prefix{}, cluster...), p("192.0.2.1/32"))
	anyV4, anyV6 := p("0.0.0.0/0"), p("::/0")
	return &dataplane.State{
		Classifier: dataplane.ClassifierState{
			Pods: []dataplane.Pod{
				{Origin: dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "pa"}, IPs: []netip.Addr{podA}, QoSRules: []int{0}, Mark: markA},
				{Origin: dataplane.Origin{Kind: "Pod", Namespace: "b", Name: "pb"}, IPs: []netip.Addr{podB}, Mark: markB},
				{Origin: dataplane.Origin{Kind: "Pod", Namespace: "c", Name: "pc"}, IPs: []netip.Addr{podC}},
			},
			ClusterNetworks: cluster,
			Frontends:       []dataplane.Frontend{{Addr: netip.MustParseAddr("203.0.113.20"), Port: dataplane.Port{Protocol: 6, Port: 8080}}},
			SteerExempt:     exempt,
			Firewalls: []dataplane.Firewall{
				{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: "a", Name: "default"}, Rules: []dataplane.FirewallRule{
					{Index: 0, Deny: true, Prefixes: []netip.Prefix{p("198.51.100.10/32")}, Text: "Deny to 198.51.100.10/32"}}},
				{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: "b", Name: "default"}, Rules: []dataplane.FirewallRule{
					{Index: 0, Prefixes: []netip.Prefix{p("203.0.113.0/24")}, Ports: []dataplane.Port{{Protocol: 6, Port: 443}}, Text: "Allow to 203.0.113.0/24 ports TCP/443"},
					{Index: 1, Deny: true, Prefixes: []netip.Prefix{anyV4}, Text: "Deny to 0.0.0.0/0"}}},
			},
			QoS: []dataplane.QoS{{Origin: dataplane.Origin{Kind: "EgressQoS", Namespace: "a", Name: "default"}, Rules: []dataplane.QoSRule{
				{Index: 0, DSCP: 10, Prefixes: []netip.Prefix{p("203.0.113.0/24")}, Text: "DSCP 10 to 203.0.113.0/24"}}}},
		},
		Nftables: dataplane.NftablesState{
			SteerMask: dataplane.DefaultMarkMask,
			SNAT:      []dataplane.SNAT{{Origin: eipOrigin, Pod: podA, To: egressAddr}, {Origin: eipOrigin, Pod: remote, To: egressAddr}},
			Exempt:    exempt,
			Guarded:   []netip.Addr{podA, remote, guarded},
			SteerNexthops: []dataplane.SteerNexthop{{Mark: markA, Nexthop: gw2},
				{Mark: markB, Nexthop: gw2}, {Mark: markB, Nexthop: gw3}, {Mark: markB, Nexthop: gw4}},
		},
		Routing: dataplane.RoutingState{
			Rules: []dataplane.RouteRule{
				{Origin: eipOrigin, Priority: 1, Mark: markA, Mask: dataplane.DefaultMarkMask, Table: 1},
				{Origin: eipOrigin, Priority: 1, IPv6: true, Mark: markA, Mask: dataplane.DefaultMarkMask, Table: 1},
				{Origin: routeOrigin, Priority: 2, Mark: markB, Mask: dataplane.DefaultMarkMask, Table: 2},
				{Origin: dataplane.Origin{Kind: "EgressService", Namespace: "c", Name: "svc"}, Src: netip.PrefixFrom(podC, 32), Network: "100"},
			},
			Tables: []dataplane.RouteTable{
				{Origin: eipOrigin, ID: 1, Routes: []dataplane.Route{{Dst: anyV4, Via: &dataplane.Nexthop{Gateway: gw2}}, {Dst: anyV6, Blackhole: true}}},
				{Origin: routeOrigin, ID: 2, Routes: []dataplane.Route{{Dst: anyV4, Nexthops: []dataplane.Nexthop{{Gateway: gw2}, {Gateway: gw3, BFD: true}, {Gateway: gw4}}}}},
			},
		},
		Addresses: []dataplane.Address{{Origin: eipOrigin, Addr: egressAddr}},
		BFD:       []dataplane.BFDPeer{{Origin: routeOrigin, Peer: gw3}},
	}
}

// node is a node namespace programmed with nodeState through the agent's Applier, its pods'
// interfaces facing a pod namespace and its network (192.0.2.0/24) facing an external host.
type node struct {
	ns   *netns.NS
	root string
	// metrics is the address of an endpoint serving the Applier's collectors (BFD sessions)
	// and the agent's steering paths, as the agent's does.
	metrics string
}

func newNode(t *testing.T) *node {
	t.Helper()
	privileged.Require(t)
	n := &node{ns: netns.New(t, "node"), root: fmt.Sprintf("/sys/fs/bpf/egressd-test-egressctl-%d", os.Getpid())}
	t.Cleanup(func() { os.RemoveAll(n.root) })
	pods, ext := netns.New(t, "pods"), netns.New(t, "ext")
	netns.Veth(t, n.ns, "pod0", pods, "eth0")
	netns.Veth(t, n.ns, "pod1", pods, "eth1")
	netns.Veth(t, n.ns, "pod2", pods, "eth2")
	netns.Veth(t, n.ns, "ext0", ext, "eth0")
	n.ns.Addr(t, "ext0", "192.0.2.1/24")
	ext.Addr(t, "eth0", gw2.String()+"/24")
	if err := n.ns.Script("ip route add 10.244.0.5/32 dev pod0 scope link", "ip route add 10.244.0.6/32 dev pod1 scope link",
		"ip route add 10.244.0.7/32 dev pod2 scope link"); err != nil {
		t.Fatal(err)
	}
	var a *kernel.Applier
	if err := n.ns.Do(func() (err error) {
		a, err = kernel.New(kernel.Options{PinRoot: n.root}, slog.New(slog.DiscardHandler))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	if err := n.ns.Do(func() error {
		if res := a.Apply(t.Context(), nodeState()); len(res.Failed) > 0 {
			return fmt.Errorf("Apply failed: %v", res.Failed)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	m := nodeagent.NewMetrics()
	m.Registry.MustRegister(a.Collectors()...)
	m.SteeredPaths.WithLabelValues("EgressIP", "eip", "0x10000").Set(1)
	m.SteeredPaths.WithLabelValues("AdminPolicyBasedExternalRoute", "gws", "0x20000").Set(1)
	// In the host's namespace: net/http dials from a goroutine of its own, not the thread
	// that runs egressctl inside the node's.
	srv := httptest.NewServer(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	n.metrics = srv.Listener.Addr().String()
	return n
}

// egressctl runs the command inside the node namespace and returns its output.
func (n *node) egressctl(t *testing.T, args ...string) string {
	t.Helper()
	var out, errs bytes.Buffer
	var code int
	if err := n.ns.Do(func() error { code = run(args, &out, &errs); return nil }); err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("egressctl %s: exit %d: %s", strings.Join(args, " "), code, errs.String())
	}
	return out.String()
}

// TestPrivilegedTrace programs a node through the agent's Applier and traces flows: the
// firewall rule (first match, ports included) and DSCP, the mark's rule and table, the
// gateways a flow may take (live group members only), and the source address it leaves with.
func TestPrivilegedTrace(t *testing.T) {
	n := newNode(t)
	for _, c := range []struct {
		src, dst, port string
		want           string
	}{
		{podA.String(), "203.0.113.10", "udp/7777", `source:   pod address 10.244.0.5 in namespace a
firewall: allow (no rule matched)
qos:      DSCP 10 by rule 0: DSCP 10 to 203.0.113.0/24
routing:  mark 0x10000: rule 6101 -> table 7101, 0.0.0.0/0: via 192.0.2.2
egress:   source 192.0.2.100 (egress IP, SNATed on this node), next hop 192.0.2.2
`},
		{podA.String(), "198.51.100.10", "", `source:   pod address 10.244.0.5 in namespace a
firewall: deny by rule 0 of a: Deny to 198.51.100.10/32
qos:      no EgressQoS rule: DSCP left as the pod set it
routing:  not routed: dropped by the firewall
egress:   none: dropped by the firewall
`},
		{podA.String(), "10.96.0.10", "tcp/53", `source:   pod address 10.244.0.5 in namespace a
firewall: not applied: 10.96.0.10 is in the cluster or service networks
qos:      no EgressQoS rule: DSCP left as the pod set it
routing:  no mark: 10.96.0.10 is a cluster network, a load-balancer IP or a node address (not steered; a Service's backend outside the cluster gets the mark after DNAT)
egress:   not steered nor SNATed: the node's own routing, source as the CNI makes it
`},
		{podB.String(), "203.0.113.10", "tcp/443", `source:   pod address 10.244.0.6 in namespace b
firewall: allow by rule 0 of b: Allow to 203.0.113.0/24 ports TCP/443
qos:      no EgressQoS rule: DSCP left as the pod set it
routing:  mark 0x20000: rule 6102 -> table 7102, 0.0.0.0/0: nexthop group GROUP, spread per flow over 192.0.2.2, 192.0.2.4
egress:   source 10.244.0.6 (the pod address: egressd keeps it), next hop 192.0.2.2, 192.0.2.4 (an egress node, which SNATs it to its egress IP, or an external gateway)
`},
		{podB.String(), "203.0.113.20", "tcp/8080", `source:   pod address 10.244.0.6 in namespace b
firewall: not applied here: 203.0.113.20 tcp/8080 is a Service's frontend, judged after DNAT by the backend
qos:      no EgressQoS rule: DSCP left as the pod set it
routing:  mark 0x20000: rule 6102 -> table 7102, 0.0.0.0/0: nexthop group GROUP, spread per flow over 192.0.2.2, 192.0.2.4 (a Service's frontend: only if DNAT sends it out of the cluster; to a pod or a node the mark is taken off)
egress:   source 10.244.0.6 (the pod address: egressd keeps it), next hop 192.0.2.2, 192.0.2.4 (an egress node, which SNATs it to its egress IP, or an external gateway)
`},
		{podB.String(), "203.0.113.10", "udp/443", `source:   pod address 10.244.0.6 in namespace b
firewall: deny by rule 1 of b: Deny to 0.0.0.0/0
qos:      no EgressQoS rule: DSCP left as the pod set it
routing:  not routed: dropped by the firewall
egress:   none: dropped by the firewall
`},
		{podC.String(), "203.0.113.10", "", `source:   10.244.0.7 is no pod the classifier knows (no firewall, QoS or mark): its packets pass it untouched
routing:  source 10.244.0.7/32: rule 6100 -> table 100 (not egressd's: the table of the pod's network)
egress:   source 10.244.0.7 (the pod address: egressd keeps it), through table 100
`},
		{remote.String(), "203.0.113.10", "", `source:   10.244.2.5 is no pod the classifier knows (no firewall, QoS or mark): its packets pass it untouched
routing:  no mark: the node's own routing
egress:   source 192.0.2.100 (egress IP, SNATed on this node), the node's own routing
`},
		{remote.String(), "10.244.1.9", "", `source:   10.244.2.5 is no pod the classifier knows (no firewall, QoS or mark): its packets pass it untouched
routing:  no mark: 10.244.1.9 is a cluster network, a load-balancer IP or a node address (not steered; a Service's backend outside the cluster gets the mark after DNAT)
egress:   not steered nor SNATed: the node's own routing, source as the CNI makes it
`},
		{guarded.String(), "203.0.113.10", "", `source:   10.244.2.7 is no pod the classifier knows (no firewall, QoS or mark): its packets pass it untouched
routing:  no mark: the node's own routing
egress:   none: dropped by the EgressIP leak guard (a selected pod that is neither steered nor SNATed here)
`},
	} {
		args := []string{"trace", "--bpf-pin-root", n.root, "--metrics-address", "0", c.src, c.dst}
		if c.port != "" {
			args = append(args, c.port)
		}
		got := regexp.MustCompile(`nexthop group \d+`).ReplaceAllString(n.egressctl(t, args...), "nexthop group GROUP")
		if got != c.want {
			t.Errorf("egressctl %s:\n%s\nwant:\n%s", strings.Join(args[5:], " "), got, c.want)
		}
	}

	// With the agent's metrics, the object of the mark says what the next hops are.
	for _, c := range []struct{ src, want string }{
		{podA.String(), "routing:  mark 0x10000 (EgressIP eip): rule 6101 -> table 7101, 0.0.0.0/0: via 192.0.2.2\n" +
			"egress:   source 192.0.2.100 (egress IP, SNATed on this node), next hop 192.0.2.2\n"},
		{podB.String(), "routing:  mark 0x20000 (AdminPolicyBasedExternalRoute gws): rule 6102 -> table 7102, 0.0.0.0/0: nexthop group GROUP, spread per flow over 192.0.2.2, 192.0.2.4\n" +
			"egress:   source 10.244.0.6 (the pod address: egressd keeps it), next hop 192.0.2.2, 192.0.2.4 (external gateways of AdminPolicyBasedExternalRoute gws: they see the pod address)\n"},
	} {
		got := n.egressctl(t, "trace", "--bpf-pin-root", n.root, "--metrics-address", n.metrics, c.src, "203.0.113.10", "tcp/443")
		if got = regexp.MustCompile(`nexthop group \d+`).ReplaceAllString(got, "nexthop group GROUP"); !strings.HasSuffix(got, c.want) {
			t.Errorf("egressctl trace %s with the agent's metrics:\n%s\nwant it to end with:\n%s", c.src, got, c.want)
		}
	}
}

// TestPrivilegedRoutes lists the node's policy routing: the rules with the object of their
// mark (from the agent's metrics), the tables with their live gateways and the BFD-gated
// gateway kept out of its group, and the agent's BFD session to it.
func TestPrivilegedRoutes(t *testing.T) {
	n := newNode(t)
	got := n.egressctl(t, "routes", "--metrics-address", n.metrics)
	got = regexp.MustCompile(`nexthop group \d+`).ReplaceAllString(got, "nexthop group GROUP")
	want := `RULE  FAMILY  FWMARK            FROM           TABLE  PATH OF
6100  ipv4    -                 10.244.0.7/32  100    -
6101  ipv4    0x10000/0xff0000  all            7101   EgressIP eip
6101  ipv6    0x10000/0xff0000  all            7101   EgressIP eip
6102  ipv4    0x20000/0xff0000  all            7102   AdminPolicyBasedExternalRoute gws

TABLE  DESTINATION  ROUTE
7101   0.0.0.0/0    via 192.0.2.2
7101   ::/0         blackhole (no live gateway: dropped, never leaked)
7102   0.0.0.0/0    nexthop group GROUP, per flow over 192.0.2.2, 192.0.2.4

gateways kept out of their groups (BFD session not Up): 192.0.2.3 (BFD Down)

BFD SESSION  STATE  DETECTION TIME  SENT  RECEIVED  TRANSITIONS  DETECTIONS
192.0.2.3    Down`
	if !strings.HasPrefix(got, want) {
		t.Errorf("egressctl routes:\n%s\nwant it to start with:\n%s", got, want)
	}

	// Without the agent's metrics the kernel's view stands alone, and says so.
	got = n.egressctl(t, "routes", "--metrics-address", "0")
	if !strings.Contains(got, "6102  ipv4    0x20000/0xff0000  all            7102   -\n") ||
		!strings.Contains(got, "gateways kept out of their groups (BFD session not Up): 192.0.2.3\n") ||
		!strings.HasSuffix(got, "BFD sessions: the agent's metrics not read (--metrics-address 0); the groups above hold the live gateways\n") {
		t.Errorf("egressctl routes --metrics-address 0:\n%s", got)
	}
}

// Every command takes its flags before or after its name, and between its arguments.
func TestPrivilegedFlagsAnyOrder(t *testing.T) {
	n := newNode(t)
	for _, orders := range [][][]string{
		{{"--bpf-pin-root", n.root, "firewall"}, {"firewall", "--bpf-pin-root", n.root}},
		{{"--bpf-pin-root=" + n.root, "qos"}, {"qos", "--bpf-pin-root=" + n.root}},
		{{"--metrics-address", n.metrics, "routes"}, {"routes", "--metrics-address", n.metrics}},
		{{"--metrics-address", "0", "-o", "json", "egressip"}, {"egressip", "-o", "json", "--metrics-address", "0"}},
		{{"--bpf-pin-root", n.root, "--metrics-address", "0", "trace", podB.String(), "203.0.113.10", "tcp/443"},
			{"trace", podB.String(), "--bpf-pin-root", n.root, "203.0.113.10", "--metrics-address", "0", "tcp/443"}},
		{{"--bpf-pin-root", n.root, "--metrics-address", n.metrics, "-o", "json", "status"},
			{"status", "--bpf-pin-root", n.root, "--metrics-address", n.metrics, "-o", "json"}},
	} {
		before, after := n.egressctl(t, orders[0]...), n.egressctl(t, orders[1]...)
		// The two runs read the kernel at different times: only the counters may differ.
		counters := regexp.MustCompile(`(?m)(  [0-9]+)+  `)
		if counters.ReplaceAllString(before, "") != counters.ReplaceAllString(after, "") || !strings.Contains(before, "\n") {
			t.Errorf("egressctl %s:\n%s\negressctl %s:\n%s", strings.Join(orders[0], " "), before, strings.Join(orders[1], " "), after)
		}
	}
}

// -o json prints the same report as the text, decodable into it, with stable field names.
func TestPrivilegedJSON(t *testing.T) {
	n := newNode(t)
	decode := func(args ...string) map[string]any {
		out := n.egressctl(t, append(args, "-o", "json", "--bpf-pin-root", n.root, "--metrics-address", n.metrics)...)
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("egressctl %s -o json: %v\n%s", strings.Join(args, " "), err, out)
		}
		return m
	}
	jsonOf := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, c := range []struct {
		args []string
		key  string
		want string
	}{
		{[]string{"firewall"}, "rules", `[{"bytes":0,"namespace":"a","packets":0,"rule":0,"spec":"Deny to 198.51.100.10/32"},` +
			`{"bytes":0,"namespace":"b","packets":0,"rule":0,"spec":"Allow to 203.0.113.0/24 ports TCP/443"},` +
			`{"bytes":0,"namespace":"b","packets":0,"rule":1,"spec":"Deny to 0.0.0.0/0"}]`},
		{[]string{"qos"}, "rules", `[{"namespace":"a","packets":0,"rule":0,"spec":"DSCP 10 to 203.0.113.0/24"}]`},
		{[]string{"egressip"}, "hosted", `[{"address":"192.0.2.100","interface":"ext0"}]`},
		{[]string{"egressip"}, "snat", `[{"egressIP":"192.0.2.100","pod":"10.244.0.5"},{"egressIP":"192.0.2.100","pod":"10.244.2.5"}]`},
		{[]string{"routes"}, "bfdSessions", `[{"detectionTime":"0s","detections":0,"packetsReceived":0,"packetsSent":PKTS,"peer":"192.0.2.3","state":"Down","transitions":0}]`},
		{[]string{"trace", podA.String(), "203.0.113.10", "udp/7777"}, "route", `{"destination":"0.0.0.0/0","gateways":[{"address":"192.0.2.2"}],"table":7101}`},
		{[]string{"trace", podA.String(), "203.0.113.10", "udp/7777"}, "qos", `{"dscp":10,"rule":0,"spec":"DSCP 10 to 203.0.113.0/24"}`},
		{[]string{"trace", podA.String(), "203.0.113.10", "udp/7777"}, "path", `{"kind":"EgressIP","object":"eip"}`},
		{[]string{"status"}, "egressIPs", `[{"address":"192.0.2.100","interface":"ext0"}]`},
		{[]string{"status"}, "steeredPaths", `[{"kind":"EgressIP","mark":"0x10000","object":"eip","podAddresses":1},` +
			`{"kind":"AdminPolicyBasedExternalRoute","mark":"0x20000","object":"gws","podAddresses":1}]`},
	} {
		got := jsonOf(decode(c.args...)[c.key])
		got = regexp.MustCompile(`"packetsSent":\d+`).ReplaceAllString(got, `"packetsSent":PKTS`)
		if got != c.want {
			t.Errorf("egressctl %s -o json: %s is\n%s\nwant\n%s", strings.Join(c.args, " "), c.key, got, c.want)
		}
	}
	// The text of trace is the JSON's steps, line by line.
	tr := decode("trace", podB.String(), "203.0.113.10", "tcp/443")
	text := n.egressctl(t, "trace", "--bpf-pin-root", n.root, "--metrics-address", n.metrics, podB.String(), "203.0.113.10", "tcp/443")
	var lines []string
	for _, s := range tr["steps"].([]any) {
		step := s.(map[string]any)
		lines = append(lines, fmt.Sprintf("%-10s%s", step["step"].(string)+":", step["text"]))
	}
	if joined := strings.Join(lines, "\n") + "\n"; joined != text {
		t.Errorf("trace's JSON steps:\n%s\ntext:\n%s", joined, text)
	}
}

// egressctl status: the agent's objects from its metrics, the kernel's rules and
// egress IPs, the BFD session.
func TestPrivilegedStatus(t *testing.T) {
	n := newNode(t)
	got := n.egressctl(t, "status", "--bpf-pin-root", n.root, "--metrics-address", n.metrics)
	for _, want := range []string{
		"\nclassifier:         3 EgressFirewall rules, 1 EgressQoS rules\n",
		"\negress IPs hosted:  192.0.2.100 on ext0\n",
		"\nEgressIP eip                       0x10000  1\n",
		"\n192.0.2.3    Down   0s",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("egressctl status lacks %q:\n%s", want, got)
		}
	}
	// Without the agent, the kernel's part stands and the rest says why it is missing.
	got = n.egressctl(t, "status", "--bpf-pin-root", n.root, "--metrics-address", "0")
	if !strings.Contains(got, "agent:              unknown (metrics not read)\n") || !strings.Contains(got, "3 EgressFirewall rules") ||
		!strings.HasSuffix(got, "\nnot read: the agent's metrics at 0: not read (--metrics-address 0)\n") {
		t.Errorf("egressctl status --metrics-address 0:\n%s", got)
	}
}

// cleanup removes egressd's objects step by step; when a step fails, the others still run, its
// report lists the steps done and those that failed, and the error names each failure.
func TestPrivilegedCleanup(t *testing.T) {
	n := newNode(t)
	stranger := n.root + "/not-egressds" // a directory: bpffs holds no regular files
	if err := os.Mkdir(stranger, 0o700); err != nil {
		t.Fatal(err)
	}
	// The agent's socket directory: one of the test's, not the host's /run/egressd.
	socketDir := filepath.Join(t.TempDir(), "run")
	cleanup := func(flags ...string) (int, cleanupReport, string) {
		var out, errs bytes.Buffer
		var code int
		if err := n.ns.Do(func() error {
			code = run(append([]string{"cleanup", "-o", "json", "--bpf-pin-root", n.root, "--cni-socket", filepath.Join(socketDir, "cni.sock")}, flags...), &out, &errs)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var r cleanupReport
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("egressctl cleanup -o json: %v\n%s", err, out.String())
		}
		return code, r, errs.String()
	}
	code, r, errs := cleanup()
	if want := "egressctl cleanup: remove " + n.root + ": directory not empty\n"; code != 1 || len(r.Removed) != 8 || errs != want ||
		len(r.Failed) != 1 || r.Failed[0]+"\n" != strings.TrimPrefix(want, "egressctl cleanup: ") {
		t.Errorf("cleanup with a stranger in the pin root: exit %d, removed %q, failed %q, %q; want exit 1, 8 steps, %q", code, r.Removed, r.Failed, errs, want)
	}
	if out, err := n.ns.Run("nft", "list", "table", "inet", "egressd"); err == nil {
		t.Errorf("after cleanup, the table is still there:\n%s", out)
	}
	if err := os.Remove(stranger); err != nil {
		t.Fatal(err)
	}
	// egressd-cni installed by the agent leaves the node's CNI chain, and its binary the node.
	confDir, binDir := t.TempDir(), t.TempDir()
	conflist := filepath.Join(confDir, "10-ptp.conflist")
	for file, content := range map[string]string{
		conflist:                             `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"ptp"},{"type":"egressd-cni","socket":"/run/egressd/cni.sock"}]}`,
		filepath.Join(binDir, "egressd-cni"): "#!/bin/sh\n",
	} {
		if err := os.WriteFile(file, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// An interface whose reverse path filter the agent loosened (it was 1) gets it back.
	if err := n.ns.Script("ip link add name rpf0 type veth peer name rpf1", "sysctl -qw net.ipv4.conf.rpf0.rp_filter=2"); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(socketDir, rpfilter.StateFile)
	if err := os.MkdirAll(filepath.Dir(state), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, []byte(`{"rpf0":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The agent's dnsName addresses, kept for its next start, go with the directory.
	if err := os.WriteFile(filepath.Join(socketDir, dnsnames.LearnedFile), []byte(`{"a.example.com":{"203.0.113.11":"2099-01-01T00:00:00Z"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(socketDir, dnsnames.StateFile), []byte(`{"www.example.com":["203.0.113.10"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, r, errs = cleanup("--cni-conf-dir", confDir, "--cni-bin-dir", binDir); code != 0 || len(r.Removed) != 10 || r.Removed[9] != "removed "+n.root ||
		r.Removed[8] != "removed "+socketDir+" (the agent's socket directory)" {
		t.Errorf("cleanup: exit %d, removed %q, %s", code, r.Removed, errs)
	}
	if got := strings.TrimSpace(n.ns.MustRun(t, "sysctl", "-n", "net.ipv4.conf.rpf0.rp_filter")); got != "1" {
		t.Errorf("after cleanup, rpf0's rp_filter is %s, want 1 (as before the agent loosened it)", got)
	}
	if _, err := os.Stat(socketDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after cleanup, %s: %v", socketDir, err)
	}
	if b, err := os.ReadFile(conflist); err != nil || strings.Contains(string(b), "egressd-cni") || !strings.Contains(string(b), "ptp") {
		t.Errorf("after cleanup, %s: %s (%v)", conflist, b, err)
	}
	if _, err := os.Stat(filepath.Join(binDir, "egressd-cni")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after cleanup, the egressd-cni binary: %v", err)
	}
}
