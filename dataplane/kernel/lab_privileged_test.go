package kernel_test

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/kernel"
	"github.com/egressd/egressd/test/netns"
)

// The lab: a node netns wired to a pod netns the way a routed CNI (ptp) wires a pod (a veth,
// the pod's /32 routed to it on the node, the node's side as the pod's gateway), and to an
// external host on the node's network. The node's main table has no default route: only
// traffic the classifier marks can leave, through egressd's table for the mark.
var (
	podIP     = netip.MustParseAddr("10.244.0.5")
	ghostIP   = netip.MustParseAddr("10.244.0.99") // a pod with no route on the node
	podGW     = netip.MustParseAddr("10.244.0.1")
	nodeIP    = netip.MustParseAddr("192.0.2.1")
	extIP     = netip.MustParseAddr("192.0.2.2")
	egressIP  = netip.MustParseAddr("192.0.2.100")
	badGW     = netip.MustParseAddr("10.99.0.1") // not on any network of the node
	dst       = netip.MustParseAddr("203.0.113.10")
	denied    = netip.MustParseAddr("198.51.100.10")
	allowed   = netip.MustParseAddr("198.51.100.11")
	serviceIP = netip.MustParseAddr("10.96.0.10")
)

const (
	mark     = 0x00010000
	badMark  = 0x00020000
	table    = 7101 // routing.Config defaults: tables 7100+, rule priorities 6100+
	badTable = 7102
	priority = 6101
	protocol = 229 // routes, rules and addresses egressd stamps (routing, addresses defaults)
	udpPort  = 7777
)

var (
	podOrigin   = dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "pa"}
	ghostOrigin = dataplane.Origin{Kind: "Pod", Namespace: "c", Name: "ghost"}
	fwOrigin    = dataplane.Origin{Kind: "EgressFirewall", Namespace: "a", Name: "default"}
	badFWOrigin = dataplane.Origin{Kind: "EgressFirewall", Namespace: "b", Name: "default"}
	qosOrigin   = dataplane.Origin{Kind: "EgressQoS", Namespace: "a", Name: "default"}
	eipOrigin   = dataplane.Origin{Kind: "EgressIP", Name: "eip"}
	badOrigin   = dataplane.Origin{Kind: "EgressIP", Name: "eip-unreachable"}
)

func prefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// fullState fills every section: pod a/pa with a firewall rule (deny 198.51.100.10), a QoS rule
// (DSCP 10 to 203.0.113.0/24) and the steering mark of EgressIP eip, whose table sends IPv4 via
// the external host (IPv6: blackhole) and whose egress address this node hosts and SNATs to.
func fullState() *dataplane.State {
	p := netip.MustParsePrefix
	cluster := []netip.Prefix{p("10.244.0.0/16"), p("10.96.0.0/12")}
	exempt := append(append([]netip.Prefix{}, cluster...), prefix(nodeIP))
	return &dataplane.State{
		Classifier: dataplane.ClassifierState{
			Pods:            []dataplane.Pod{{Origin: podOrigin, IPs: []netip.Addr{podIP}, QoSRules: []int{0}, Mark: mark}},
			ClusterNetworks: cluster,
			SteerExempt:     exempt,
			Firewalls: []dataplane.Firewall{{Origin: fwOrigin, Rules: []dataplane.FirewallRule{
				{Index: 0, Deny: true, Prefixes: []netip.Prefix{prefix(denied)}, Text: "Deny to 198.51.100.10/32"}}}},
			QoS: []dataplane.QoS{{Origin: qosOrigin, Rules: []dataplane.QoSRule{
				{Index: 0, DSCP: 10, Prefixes: []netip.Prefix{p("203.0.113.0/24")}, Text: "DSCP 10 to 203.0.113.0/24"}}}},
		},
		Nftables: dataplane.NftablesState{
			SteerMask:     dataplane.DefaultMarkMask,
			SNAT:          []dataplane.SNAT{{Origin: eipOrigin, Pod: podIP, To: egressIP}},
			Exempt:        exempt,
			Guarded:       []netip.Addr{podIP},
			SteerNexthops: []dataplane.SteerNexthop{{Mark: mark, Nexthop: extIP}},
		},
		Routing: dataplane.RoutingState{
			Rules: []dataplane.RouteRule{
				{Origin: eipOrigin, Priority: 1, Mark: mark, Mask: dataplane.DefaultMarkMask, Table: 1},
				{Origin: eipOrigin, Priority: 1, IPv6: true, Mark: mark, Mask: dataplane.DefaultMarkMask, Table: 1},
			},
			Tables: []dataplane.RouteTable{{Origin: eipOrigin, ID: 1, Routes: []dataplane.Route{
				{Dst: p("0.0.0.0/0"), Via: &dataplane.Nexthop{Gateway: extIP}},
				{Dst: p("::/0"), Blackhole: true},
			}}},
		},
		Addresses: []dataplane.Address{{Origin: eipOrigin, Addr: egressIP}},
	}
}

type lab struct {
	node, pod, ext *netns.NS
	root           string
}

var labSeq atomic.Uint32

func newLab(t *testing.T) *lab {
	t.Helper()
	l := &lab{node: netns.New(t, "node"), pod: netns.New(t, "pod"), ext: netns.New(t, "ext"),
		root: fmt.Sprintf("/sys/fs/bpf/egressd-test-kernel-%d-%d", os.Getpid(), labSeq.Add(1))}
	t.Cleanup(func() { os.RemoveAll(l.root) })
	netns.Veth(t, l.node, "pod0", l.pod, "eth0")
	netns.Veth(t, l.node, "ext0", l.ext, "eth0")
	l.pod.Addr(t, "eth0", podIP.String()+"/32")
	l.node.Addr(t, "pod0", podGW.String()+"/32")
	l.node.Addr(t, "ext0", nodeIP.String()+"/24")
	l.ext.Addr(t, "eth0", extIP.String()+"/24")
	l.ext.Addr(t, "lo", dst.String()+"/32", denied.String()+"/32", allowed.String()+"/32")
	for _, err := range []error{
		l.pod.Script("ip route add "+podGW.String()+" dev eth0 scope link", "ip route add default via "+podGW.String()+" dev eth0"),
		l.node.Script("sysctl -qw net.ipv4.ip_forward=1", "sysctl -qw net.ipv4.conf.all.rp_filter=0", "sysctl -qw net.ipv4.conf.default.rp_filter=0",
			"ip route add "+podIP.String()+"/32 dev pod0 scope link"),
		l.ext.Script("sysctl -qw net.ipv4.conf.all.rp_filter=0", "sysctl -qw net.ipv4.conf.default.rp_filter=0"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The external host counts what arrives per destination and DSCP.
	cmd := l.ext.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader("table inet egt {\n chain pre {\n  type filter hook prerouting priority 0\n" +
		"  ip daddr " + dst.String() + " ip dscp 10 counter\n" +
		"  ip daddr " + allowed.String() + " ip dscp 0 counter\n }\n}\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	return l
}

// in runs f on a thread inside the node's namespace.
func (l *lab) in(t *testing.T, f func() error) {
	t.Helper()
	if err := l.node.Do(f); err != nil {
		t.Fatal(err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// applier creates the composite Applier inside the node's namespace, with the lab's pin root.
func (l *lab) applier(t *testing.T) *kernel.Applier {
	t.Helper()
	return l.applierWith(t, kernel.Options{})
}

// applierWith makes an applier with o, pinning under the lab's root.
func (l *lab) applierWith(t *testing.T, o kernel.Options) *kernel.Applier {
	t.Helper()
	o.PinRoot = l.root
	var a *kernel.Applier
	l.in(t, func() (err error) {
		a, err = kernel.New(o, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
		return err
	})
	t.Cleanup(a.Close)
	return a
}

// apply runs Apply on a thread inside the node's namespace (the Applier's netlink and bpf work
// acts on the namespace of the calling thread).
func (l *lab) apply(t *testing.T, a *kernel.Applier, s *dataplane.State) dataplane.Result {
	t.Helper()
	var res dataplane.Result
	l.in(t, func() error { res = a.Apply(t.Context(), s); return nil })
	return res
}

func (l *lab) mustApply(t *testing.T, a *kernel.Applier, s *dataplane.State) {
	t.Helper()
	if res := l.apply(t, a, s); len(res.Failed) > 0 {
		t.Fatalf("Apply failed: %v", res.Failed)
	}
}

// nft lists the table inet egressd of the node.
func (l *lab) nft(t *testing.T) string {
	t.Helper()
	return l.node.MustRun(t, "nft", "list", "table", "inet", "egressd")
}

var setRE = regexp.MustCompile(`(?s)(?:set|map) (\S+) \{(.*?)\n\t\}`)

// elements returns the elements of each set and map of an nft listing ("" when empty).
func elements(listing string) map[string]string {
	out := map[string]string{}
	for _, m := range setRE.FindAllStringSubmatch(listing, -1) {
		out[m[1]] = ""
		if _, after, ok := strings.Cut(m[2], "elements = { "); ok {
			out[m[1]] = strings.Join(strings.Fields(strings.TrimSuffix(strings.TrimSpace(after), "}")), " ")
		}
	}
	return out
}

// ip runs iproute2 in the node, lines without trailing spaces.
func (l *lab) ip(t *testing.T, args ...string) string {
	t.Helper()
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(l.node.MustRun(t, "ip", args...)), "\n") {
		lines = append(lines, strings.TrimRight(line, " "))
	}
	return strings.Join(lines, "\n")
}

// ownedRules are the node's ip rules in egressd's priority range, both families.
func (l *lab) ownedRules(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, fam := range []string{"-4", "-6"} {
		for _, line := range strings.Split(l.ip(t, fam, "rule", "show"), "\n") {
			prio, _, _ := strings.Cut(line, ":")
			if n, err := strconv.Atoi(prio); err == nil && n >= 6100 && n < 6200 {
				out = append(out, fam+" "+strings.Join(strings.Fields(line), " "))
			}
		}
	}
	return out
}
