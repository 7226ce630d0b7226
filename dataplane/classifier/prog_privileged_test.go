package classifier_test

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/test/privileged"
)

const (
	tcxNext = 0xffffffff // TCX_NEXT (-1)
	tcxDrop = 2
)

var (
	podA  = netip.MustParseAddr("10.244.0.5")
	podA6 = netip.MustParseAddr("fd00:10:244::5")
	podB  = netip.MustParseAddr("10.244.0.6") // namespace without policies
	pfxs  = func(s ...string) (out []netip.Prefix) {
		for _, x := range s {
			out = append(out, netip.MustParsePrefix(x))
		}
		return
	}
	origins = dataplane.Origin{Kind: "EgressFirewall", Namespace: "a", Name: "default"}
)

func load(t testing.TB) *classifier.Classifier {
	t.Helper()
	return loadWith(t, classifier.Options{ACLLogRate: classifier.DefaultACLLogRate})
}

func loadWith(t testing.TB, o classifier.Options) *classifier.Classifier {
	t.Helper()
	privileged.Require(t)
	root := pinRoot()
	c, err := classifier.Load(root, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); os.RemoveAll(root) })
	return c
}

// pinRoot is where load pins the classifier's maps.
func pinRoot() string { return fmt.Sprintf("/sys/fs/bpf/egressd-test-classifier-%d", os.Getpid()) }

// pkt builds an Ethernet frame from src to dst; proto "tcp" (a SYN), "tcp-ack", "tcp-synack",
// "udp", "sctp", "icmp".
func pkt(t testing.TB, src, dst netip.Addr, proto string, dport uint16, tos uint8, frag bool) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	var l3 gopacket.NetworkLayer
	var ipProto layers.IPProtocol
	switch proto {
	case "tcp", "tcp-ack", "tcp-synack":
		ipProto = layers.IPProtocolTCP
	case "udp":
		ipProto = layers.IPProtocolUDP
	case "sctp":
		ipProto = layers.IPProtocolSCTP
	default:
		ipProto = layers.IPProtocolICMPv4
		if src.Is6() {
			ipProto = layers.IPProtocolICMPv6
		}
	}
	if src.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, TOS: tos, Protocol: ipProto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		if frag {
			ip.FragOffset = 100
		}
		l3 = ip
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		l3 = &layers.IPv6{Version: 6, HopLimit: 64, TrafficClass: tos, NextHeader: ipProto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	}
	var l4 gopacket.SerializableLayer
	switch proto {
	case "tcp", "tcp-ack", "tcp-synack":
		tcp := &layers.TCP{SrcPort: 40000, DstPort: layers.TCPPort(dport), SYN: proto != "tcp-ack", ACK: proto != "tcp", Window: 1000}
		_ = tcp.SetNetworkLayerForChecksum(l3)
		l4 = tcp
	case "udp":
		udp := &layers.UDP{SrcPort: 40000, DstPort: layers.UDPPort(dport)}
		_ = udp.SetNetworkLayerForChecksum(l3)
		l4 = udp
	case "sctp":
		l4 = &layers.SCTP{SrcPort: 40000, DstPort: layers.SCTPPort(dport)}
	default:
		l4 = gopacket.Payload([]byte{8, 0, 0, 0, 0, 0, 0, 0})
	}
	buf := gopacket.NewSerializeBuffer()
	if frag { // a later fragment carries no L4 header
		l4 = gopacket.Payload([]byte("0123456789abcdef"))
	}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, eth, l3.(gopacket.SerializableLayer), l4); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func run(t testing.TB, c *classifier.Classifier, data []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(data)+64)
	opts := ebpf.RunOptions{Data: data, DataOut: out}
	ret, err := c.Program.Run(&opts)
	if err != nil {
		t.Fatal(err)
	}
	return ret, opts.DataOut
}

func firewallState() *dataplane.ClassifierState {
	return &dataplane.ClassifierState{
		Pods: []dataplane.Pod{
			{Origin: dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "pa"}, IPs: []netip.Addr{podA, podA6}},
			{Origin: dataplane.Origin{Kind: "Pod", Namespace: "b", Name: "pb"}, IPs: []netip.Addr{podB}},
		},
		ClusterNetworks: pfxs("10.244.0.0/16", "fd00:10:244::/48", "10.96.0.0/16"),
		Firewalls: []dataplane.Firewall{{Origin: origins, Rules: []dataplane.FirewallRule{
			{Index: 0, Prefixes: pfxs("192.0.2.0/24", "2001:db8::/32"), Ports: []dataplane.Port{{Protocol: 6, Port: 443}, {Protocol: 132, Port: 9}}},
			{Index: 1, Prefixes: pfxs("198.51.100.7/32")},
			{Index: 2, Deny: true, Prefixes: pfxs("0.0.0.0/0", "::/0")},
		}}},
	}
}

func TestPrivilegedClassifierFirewallVerdicts(t *testing.T) {
	c := load(t)
	if failed := c.Apply(firewallState(), nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	ip := netip.MustParseAddr
	for _, tc := range []struct {
		name    string
		src     netip.Addr
		dst     string
		proto   string
		port    uint16
		frag    bool
		verdict uint32
	}{
		{"allowed cidr+port", podA, "192.0.2.1", "tcp", 443, false, tcxNext},
		{"same cidr other port", podA, "192.0.2.1", "tcp", 80, false, tcxDrop},
		{"same cidr udp 443", podA, "192.0.2.1", "udp", 443, false, tcxDrop},
		{"sctp port rule", podA, "192.0.2.1", "sctp", 9, false, tcxNext},
		{"allowed host", podA, "198.51.100.7", "udp", 53, false, tcxNext},
		{"denied elsewhere", podA, "203.0.113.1", "tcp", 443, false, tcxDrop},
		{"icmp denied", podA, "203.0.113.1", "icmp", 0, false, tcxDrop},
		// Not a SYN: conntrack is asked, knows no such connection, so it is not a reply.
		{"tcp ack denied", podA, "203.0.113.1", "tcp-ack", 443, false, tcxDrop},
		{"tcp syn-ack denied", podA, "203.0.113.1", "tcp-synack", 443, false, tcxDrop},
		{"pod to pod never filtered", podA, "10.244.3.9", "tcp", 80, false, tcxNext},
		{"service network never filtered", podA, "10.96.0.10", "udp", 53, false, tcxNext},
		{"namespace without firewall", podB, "203.0.113.1", "tcp", 443, false, tcxNext},
		{"unknown source", ip("10.244.9.9").Unmap(), "203.0.113.1", "tcp", 443, false, tcxNext},
		{"later fragment to port-only allow is denied", podA, "192.0.2.1", "tcp", 443, true, tcxDrop},
		{"v6 allowed", podA6, "2001:db8::1", "tcp", 443, false, tcxNext},
		{"v6 denied", podA6, "2001:db8::1", "tcp", 22, false, tcxDrop},
		{"v6 pod to pod", podA6, "fd00:10:244:1::7", "udp", 53, false, tcxNext},
		{"v6 neighbour discovery to link-local", podA6, "fe80::1", "icmp", 0, false, tcxNext},
		{"v6 neighbour discovery to solicited-node multicast", podA6, "ff02::1:ff00:1", "icmp", 0, false, tcxNext},
	} {
		got, _ := run(t, c, pkt(t, tc.src, ip(tc.dst), tc.proto, tc.port, 0, tc.frag))
		if got != tc.verdict {
			t.Errorf("%s: verdict %#x, want %#x", tc.name, got, tc.verdict)
		}
	}
	// Malformed: a TCP header cut short is judged without ports (denied here), never passed.
	full := pkt(t, podA, ip("192.0.2.1"), "tcp", 443, 0, false)
	if got, _ := run(t, c, full[:14+20+2]); got != tcxDrop {
		t.Errorf("truncated TCP to a port-only allow: %#x, want drop", got)
	}
	arp := append(append([]byte{}, full[:12]...), 0x08, 0x06) // ARP: not IP, not ours to judge
	if got, _ := run(t, c, append(arp, make([]byte, 28)...)); got != tcxNext {
		t.Errorf("ARP: %#x, want next", got)
	}
}

// TestPrivilegedClassifierCounters: each judged packet counts, packets and bytes, for the rule
// that decided, allow or deny; packets no rule judges (pod to pod, a namespace without firewall)
// count nowhere.
func TestPrivilegedClassifierCounters(t *testing.T) {
	c := load(t)
	if failed := c.Apply(firewallState(), nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	ip := netip.MustParseAddr
	want := map[classifier.RuleRef]classifier.Counters{}
	for _, tc := range []struct {
		src   netip.Addr
		dst   string
		proto string
		port  uint16
		n     int
		rule  int // -1: counted nowhere
	}{
		{podA, "203.0.113.1", "udp", 53, 3, 2},
		{podA, "198.51.100.7", "udp", 53, 2, 1},
		{podA, "192.0.2.1", "tcp", 443, 1, 0},
		{podA, "10.244.3.9", "tcp", 80, 2, -1}, // pod to pod
		{podB, "203.0.113.1", "tcp", 443, 2, -1},
	} {
		data := pkt(t, tc.src, ip(tc.dst), tc.proto, tc.port, 0, false)
		for range tc.n {
			run(t, c, data)
		}
		if tc.rule >= 0 {
			ref := classifier.RuleRef{Namespace: "a", Rule: tc.rule}
			want[ref] = classifier.Counters{Packets: want[ref].Packets + uint64(tc.n), Bytes: want[ref].Bytes + uint64(tc.n*len(data))}
		}
	}
	stats, err := c.FirewallCounters()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(stats, want) {
		t.Errorf("firewall counters %+v, want %+v", stats, want)
	}
}

// TestPrivilegedClassifierDecisionCache: a decision the program cached (the second identical
// packet takes it from egressd_fw_verdicts) gives way to a rule change and to a cluster network
// change; cached decisions are counted like fresh ones.
func TestPrivilegedClassifierDecisionCache(t *testing.T) {
	c := load(t)
	st := firewallState()
	if failed := c.Apply(st, nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	data := pkt(t, podA, netip.MustParseAddr("198.51.100.7"), "udp", 53, 0, false) // rule 1 allows
	step := func(name string, want uint32) {
		t.Helper()
		for i := range 2 { // decided, then cached
			if got, _ := run(t, c, data); got != want {
				t.Errorf("%s, packet %d: verdict %#x, want %#x", name, i, got, want)
			}
		}
	}
	step("allowed", tcxNext)
	stats, err := c.FirewallCounters()
	if err != nil {
		t.Fatal(err)
	}
	if got := stats[classifier.RuleRef{Namespace: "a", Rule: 1}]; got.Packets != 2 {
		t.Errorf("allow rule counted %d packets, want 2", got.Packets)
	}
	st.Firewalls[0].Rules[1].Deny = true
	if failed := c.Apply(st, nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	step("rule 1 now denies", tcxDrop)
	st.ClusterNetworks = append(st.ClusterNetworks, netip.MustParsePrefix("198.51.100.0/24"))
	if failed := c.Apply(st, nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	step("destination now in a cluster network", tcxNext)
}

// TestPrivilegedClassifierFrontends: a Service's frontend outside the service networks (an
// external or load-balancer IP) is let through for its protocol and port only, to be judged
// after DNAT by its backend; the address's other ports and protocols, and later fragments
// whose first was not seen, stay under the firewall. Decisions cached before a frontend comes
// or goes are not reused.
func TestPrivilegedClassifierFrontends(t *testing.T) {
	c := load(t)
	st := firewallState()
	ip := netip.MustParseAddr
	web, web6 := ip("203.0.113.1"), ip("2001:db8:1::50")
	if failed := c.Apply(st, nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	if got, _ := run(t, c, pkt(t, podA, web, "tcp", 80, 0, false)); got != tcxDrop {
		t.Fatalf("before the Service: verdict %#x, want drop", got)
	}
	front := func(a netip.Addr, proto uint8, port uint16) dataplane.Frontend {
		return dataplane.Frontend{Addr: a, Port: dataplane.Port{Protocol: proto, Port: port}}
	}
	st.Frontends = []dataplane.Frontend{front(web, 6, 80), front(web, 132, 9), front(web6, 17, 53)}
	if failed := c.Apply(st, nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	for _, tc := range []struct {
		name    string
		src     netip.Addr
		dst     netip.Addr
		proto   string
		port    uint16
		frag    bool
		verdict uint32
	}{
		{"frontend", podA, web, "tcp", 80, false, tcxNext},
		{"frontend sctp", podA, web, "sctp", 9, false, tcxNext},
		{"frontend v6", podA6, web6, "udp", 53, false, tcxNext},
		{"other port", podA, web, "tcp", 81, false, tcxDrop},
		{"other protocol", podA, web, "udp", 80, false, tcxDrop},
		{"icmp", podA, web, "icmp", 0, false, tcxDrop},
		{"later fragment", podA, web, "tcp", 80, true, tcxDrop},
		{"v6 other protocol", podA6, web6, "tcp", 53, false, tcxDrop},
	} {
		if got, _ := run(t, c, pkt(t, tc.src, tc.dst, tc.proto, tc.port, 0, tc.frag)); got != tc.verdict {
			t.Errorf("%s: verdict %#x, want %#x", tc.name, got, tc.verdict)
		}
	}
	st.Frontends = nil
	if failed := c.Apply(st, nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	if got, _ := run(t, c, pkt(t, podA, web, "tcp", 80, 0, false)); got != tcxDrop {
		t.Errorf("after the Service went: verdict %#x, want drop", got)
	}
}

// TestPrivilegedClassifierNewPodSameFirewalls: a sync that brings a new pod and the same
// firewalls (the classifier reuses what it computed from them, known by their fingerprint or by
// the version their producer gave them) puts the pod under its namespace's firewall; a
// firewall changed after that is enforced, for both pods.
func TestPrivilegedClassifierNewPodSameFirewalls(t *testing.T) {
	for _, versions := range [][3]uint64{{0, 0, 0}, {7, 7, 8}} {
		t.Run(fmt.Sprintf("versions %v", versions), func(t *testing.T) {
			c := load(t)
			first := firewallState()
			first.FirewallsVersion = versions[0]
			if failed := c.Apply(first, nil, nil); len(failed) > 0 {
				t.Fatal(failed)
			}
			podA2 := netip.MustParseAddr("10.244.0.7")
			withPod := func(version uint64) *dataplane.ClassifierState {
				st := firewallState()
				st.FirewallsVersion = version
				st.Pods = append(st.Pods, dataplane.Pod{Origin: dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "pa2"}, IPs: []netip.Addr{podA2}})
				return st
			}
			if failed := c.Apply(withPod(versions[1]), nil, nil); len(failed) > 0 {
				t.Fatal(failed)
			}
			denied, allowed := netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("198.51.100.7")
			if got, _ := run(t, c, pkt(t, podA2, denied, "tcp", 443, 0, false)); got != tcxDrop {
				t.Errorf("new pod under the same firewalls, to a denied destination: %#x, want drop", got)
			}
			if got, _ := run(t, c, pkt(t, podA2, allowed, "udp", 53, 0, false)); got != tcxNext {
				t.Errorf("new pod under the same firewalls, to an allowed destination: %#x, want next", got)
			}
			changed := withPod(versions[2])
			changed.Firewalls[0].Rules[1].Deny = true
			if failed := c.Apply(changed, nil, nil); len(failed) > 0 {
				t.Fatal(failed)
			}
			for _, src := range []netip.Addr{podA, podA2} {
				if got, _ := run(t, c, pkt(t, src, allowed, "udp", 53, 0, false)); got != tcxDrop {
					t.Errorf("%s after rule 1 became a deny: %#x, want drop", src, got)
				}
			}
		})
	}
}

func TestPrivilegedClassifierDSCP(t *testing.T) {
	c := load(t)
	st := &dataplane.ClassifierState{
		Pods: []dataplane.Pod{{Origin: dataplane.Origin{Kind: "Pod", Namespace: "q", Name: "p"}, IPs: []netip.Addr{podA, podA6}, QoSRules: []int{0, 1}}},
		QoS: []dataplane.QoS{{Origin: dataplane.Origin{Kind: "EgressQoS", Namespace: "q", Name: "default"}, Rules: []dataplane.QoSRule{
			{Index: 0, DSCP: 46, Prefixes: pfxs("203.0.113.0/24", "2001:db8::/32")},
			{Index: 1, DSCP: 10, Prefixes: pfxs("0.0.0.0/0", "::/0")},
		}}},
	}
	if failed := c.Apply(st, nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	wantCounters := map[classifier.RuleRef]classifier.Counters{}
	for _, tc := range []struct {
		dst       string
		tos, want uint8
	}{
		{"203.0.113.9", 0, 46<<2 | 0},
		{"203.0.113.9", 3, 46<<2 | 3}, // ECN kept
		{"192.0.2.1", 1, 10<<2 | 1},
		{"2001:db8::9", 2, 46<<2 | 2},
		{"2001:db9::9", 0, 10 << 2},
	} {
		dst := netip.MustParseAddr(tc.dst)
		src := podA
		if dst.Is6() {
			src = podA6
		}
		data := pkt(t, src, dst, "udp", 53, tc.tos, false)
		rule := 1
		if tc.want>>2 == 46 {
			rule = 0
		}
		ref := classifier.RuleRef{Namespace: "q", Rule: rule}
		wantCounters[ref] = classifier.Counters{Packets: wantCounters[ref].Packets + 1, Bytes: wantCounters[ref].Bytes + uint64(len(data))}
		ret, out := run(t, c, data)
		if ret != tcxNext {
			t.Fatalf("verdict %#x", ret)
		}
		p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
		if dst.Is4() {
			ip := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			if ip.TOS != tc.want {
				t.Errorf("%s tos %#x: got %#x, want %#x", tc.dst, tc.tos, ip.TOS, tc.want)
			}
			if sum := ipv4Checksum(out[14 : 14+20]); sum != 0 {
				t.Errorf("%s: IPv4 header checksum does not verify (%#x)", tc.dst, sum)
			}
		} else {
			ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
			if ip.TrafficClass != tc.want || ip.FlowLabel != 0 {
				t.Errorf("%s tclass %#x: got %#x flow %d, want %#x", tc.dst, tc.tos, ip.TrafficClass, ip.FlowLabel, tc.want)
			}
		}
	}
	// Each marked packet counts for the rule that marked it (3 for rule 0, 2 for rule 1).
	stats, err := c.QoSCounters()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(stats, wantCounters) {
		t.Errorf("QoS counters %+v, want %+v", stats, wantCounters)
	}
}

// ipv4Checksum is the one's complement sum over a header; 0 when its checksum is right.
func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// An update that cannot compile keeps what the namespace had (fail closed).
func TestPrivilegedClassifierFailClosed(t *testing.T) {
	c := load(t)
	if failed := c.Apply(firewallState(), nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	bad := firewallState()
	bad.Firewalls[0] = dataplane.Firewall{Origin: origins, Err: fmt.Errorf("invalid")}
	if failed := c.Apply(bad, nil, nil); failed[origins] == nil {
		t.Fatal("no failure reported")
	}
	if got, _ := run(t, c, pkt(t, podA, netip.MustParseAddr("203.0.113.1"), "tcp", 443, 0, false)); got != tcxDrop {
		t.Errorf("after a failed update the deny is gone (%#x)", got)
	}
	if got, _ := run(t, c, pkt(t, podA, netip.MustParseAddr("192.0.2.1"), "tcp", 443, 0, false)); got != tcxNext {
		t.Errorf("after a failed update the allow is gone (%#x)", got)
	}
	// Deleting the firewall removes its entries.
	none := firewallState()
	none.Firewalls = nil
	if failed := c.Apply(none, nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	if got, _ := run(t, c, pkt(t, podA, netip.MustParseAddr("203.0.113.1"), "tcp", 443, 0, false)); got != tcxNext {
		t.Errorf("firewall deleted but still enforced (%#x)", got)
	}
}

// A new agent (Load on the same pins) adopts the entries its predecessor wrote: they keep
// enforcing until its first Apply, which removes those of a namespace deleted meanwhile.
func TestPrivilegedClassifierAdoptsPinnedState(t *testing.T) {
	privileged.Require(t)
	root := fmt.Sprintf("/sys/fs/bpf/egressd-test-adopt-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(root) })
	c, err := classifier.Load(root, classifier.Options{ACLLogRate: classifier.DefaultACLLogRate})
	if err != nil {
		t.Fatal(err)
	}
	st := firewallState()
	st.Firewalls = append(st.Firewalls, dataplane.Firewall{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: "b", Name: "default"},
		Rules: []dataplane.FirewallRule{{Index: 0, Deny: true, Prefixes: pfxs("0.0.0.0/0"), Text: "Deny to 0.0.0.0/0"}}})
	if failed := c.Apply(st, nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	c.Close()

	c2, err := classifier.Load(root, classifier.Options{ACLLogRate: classifier.DefaultACLLogRate})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, _ := run(t, c2, pkt(t, podB, netip.MustParseAddr("203.0.113.1"), "tcp", 443, 0, false)); got != tcxDrop {
		t.Fatalf("before the first Apply the adopted deny of namespace b is gone (%#x)", got)
	}
	if failed := c2.Apply(firewallState(), nil, nil); len(failed) > 0 { // namespace b's firewall deleted
		t.Fatal(failed)
	}
	in, err := classifier.Inspect(root)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	rules, _ := in.Rules(false)
	for _, r := range rules {
		if r.Namespace == "b" {
			t.Errorf("rule of deleted namespace b left: %+v", r)
		}
	}
	if len(rules) != 3 {
		t.Errorf("%d rules programmed, want namespace a's 3", len(rules))
	}
	if got, _ := run(t, c2, pkt(t, podA, netip.MustParseAddr("203.0.113.1"), "tcp", 443, 0, false)); got != tcxDrop {
		t.Errorf("namespace a's deny lost across the restart (%#x)", got)
	}
}

// TestPrivilegedClassifierCleanup: Cleanup leaves the pin root empty (every pinned map goes).
func TestPrivilegedClassifierCleanup(t *testing.T) {
	privileged.Require(t)
	root := fmt.Sprintf("/sys/fs/bpf/egressd-test-cleanup-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(root) })
	c, err := classifier.Load(root, classifier.Options{ACLLogRate: classifier.DefaultACLLogRate})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if pinned, err := os.ReadDir(root); err != nil || len(pinned) == 0 {
		t.Fatalf("nothing pinned under %s to clean up (%v)", root, err)
	}
	if err := classifier.Cleanup(root); err != nil {
		t.Fatal(err)
	}
	if left, err := os.ReadDir(root); len(left) > 0 || (err != nil && !os.IsNotExist(err)) {
		var names []string
		for _, e := range left {
			names = append(names, e.Name())
		}
		t.Errorf("left under the pin root: %v", names)
	}
}
