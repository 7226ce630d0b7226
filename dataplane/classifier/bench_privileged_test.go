package classifier_test

import (
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/test/privileged"
)

// benchRules is a namespace's firewall of n rules: n-1 /24s (every fifth restricted to a port),
// then a deny-all; the benchmark packet's destination only matches the last rule, so that a
// linear evaluation would scan all of them.
func benchRules(n int) []dataplane.FirewallRule {
	var rules []dataplane.FirewallRule
	for i := range n - 1 {
		r := dataplane.FirewallRule{Index: i, Prefixes: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", 100+i/250, i%250))}}
		if i%5 == 0 {
			r.Ports = []dataplane.Port{{Protocol: 6, Port: 443}}
		}
		rules = append(rules, r)
	}
	return append(rules, dataplane.FirewallRule{Index: n - 1, Deny: true, Prefixes: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}})
}

// benchPortRules is a namespace's firewall of n rules written one per port: "Allow 0.0.0.0/0
// TCP 1", ... "TCP n-1", then a deny-all: n-1 rules restricted to ports overlap on one prefix.
func benchPortRules(n int) []dataplane.FirewallRule {
	var rules []dataplane.FirewallRule
	for i := range n - 1 {
		rules = append(rules, dataplane.FirewallRule{Index: i, Prefixes: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")},
			Ports: []dataplane.Port{{Protocol: 6, Port: uint16(1 + i)}}})
	}
	return append(rules, dataplane.FirewallRule{Index: n - 1, Deny: true, Prefixes: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}})
}

// BenchmarkPrivilegedClassifier reports ns per packet (BPF_PROG_TEST_RUN, 64-byte-class TCP SYN
// or UDP datagram from a pod to an external address) for an empty program and for the
// classifier with 1, 100 and 8000 rules in one namespace, 8000 rules one per port on one prefix
// ("8000-port-rules": denied is to a port none names, allowed to the last port rule's), and
// 1000 namespaces of 100 rules; "fragmented-udp" are the first and a later fragment of a denied
// datagram larger than the MTU.
func BenchmarkPrivilegedClassifier(b *testing.B) {
	privileged.Require(b)
	denied := pkt(b, podA, netip.MustParseAddr("203.0.113.1"), "tcp", 443, 0, false)
	deniedUDP := pkt(b, podA, netip.MustParseAddr("203.0.113.1"), "udp", 443, 0, false)

	empty, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}})
	if err != nil {
		b.Fatal(err)
	}
	defer empty.Close()
	b.Run("empty-program", func(b *testing.B) { benchRun(b, empty, denied) })
	b.Run("empty-program/first-packet", func(b *testing.B) { benchFirstPacket(b, empty, nil, denied) })
	for _, tc := range []struct {
		name       string
		namespaces int
		rules      int
		portRules  bool
	}{{"1-rule", 1, 1, false}, {"100-rules", 1, 100, false}, {"8000-rules", 1, 8000, false}, {"8000-port-rules", 1, 8000, true}, {"1000-namespaces-x-100-rules", 1000, 100, false}} {
		b.Run(tc.name, func(b *testing.B) {
			c := load(b)
			st := &dataplane.ClassifierState{ClusterNetworks: pfxs("10.244.0.0/16")}
			for i := range tc.namespaces {
				ns := fmt.Sprintf("ns-%d", i)
				ip := netip.AddrFrom4([4]byte{10, 244, byte(i / 250), byte(1 + i%250)})
				if i == 0 {
					ip = podA
				}
				st.Pods = append(st.Pods, dataplane.Pod{Origin: dataplane.Origin{Kind: "Pod", Namespace: ns, Name: "p"}, IPs: []netip.Addr{ip}})
				rules := benchRules(tc.rules)
				if tc.portRules {
					rules = benchPortRules(tc.rules)
				}
				st.Firewalls = append(st.Firewalls, dataplane.Firewall{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: ns, Name: "default"}, Rules: rules})
			}
			denied, deniedUDP := denied, deniedUDP
			if tc.portRules { // a port no rule names
				denied = pkt(b, podA, netip.MustParseAddr("203.0.113.1"), "tcp", 9000, 0, false)
				deniedUDP = pkt(b, podA, netip.MustParseAddr("203.0.113.1"), "udp", 7999, 0, false)
			}
			if failed := c.Apply(st, nil, nil); len(failed) > 0 {
				b.Fatal(failed)
			}
			if ret, _ := run(b, c, denied); ret != tcxDrop {
				b.Fatalf("verdict %#x, want drop by the last rule", ret)
			}
			allowed := pkt(b, podA, netip.MustParseAddr("10.100.0.9"), "tcp", 443, 0, false) // rule 0
			if tc.portRules {
				allowed = pkt(b, podA, netip.MustParseAddr("203.0.113.1"), "tcp", uint16(tc.rules-1), 0, false) // rule n-2
			}
			if ret, _ := run(b, c, allowed); tc.rules > 1 && ret != tcxNext {
				b.Fatalf("verdict %#x, want allow by rule 0", ret)
			}
			gen, err := ebpf.LoadPinnedMap(fmt.Sprintf("/sys/fs/bpf/egressd-test-classifier-%d/egressd_fw_gen", os.Getpid()), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer gen.Close()
			// A flow's later packets take the decision cached by its first; "first-packet" is a
			// packet whose decision is made afresh (the cache made stale before each).
			b.Run("denied", func(b *testing.B) { benchRun(b, c.Program, denied) })
			b.Run("denied/first-packet", func(b *testing.B) { benchFirstPacket(b, c.Program, gen, denied) })
			// A denied packet that is not a TCP SYN also asks conntrack whether it is a reply.
			b.Run("denied-udp", func(b *testing.B) { benchRun(b, c.Program, deniedUDP) })
			if tc.rules > 1 {
				b.Run("allowed", func(b *testing.B) { benchRun(b, c.Program, allowed) })
				b.Run("allowed/first-packet", func(b *testing.B) { benchFirstPacket(b, c.Program, gen, allowed) })
			}
			// A UDP datagram larger than the MTU, to the denied destination: its first fragment
			// is judged and its verdict remembered; a later one, without ports, follows it.
			first := frame(podA, remote, 17, udp(40000, 443, 1472), &fragInfo{id: 7, more: true})
			later := frame(podA, remote, 17, make([]byte, 1480), &fragInfo{id: 7, offset: 185})
			if tc.portRules {
				first = frame(podA, remote, 17, udp(40000, 7999, 1472), &fragInfo{id: 7, more: true})
			}
			for _, f := range [][]byte{first, later} {
				if ret, _ := run(b, c, f); ret != tcxDrop {
					b.Fatalf("fragment verdict %#x, want drop by the last rule", ret)
				}
			}
			b.Run("fragmented-udp/first", func(b *testing.B) { benchRun(b, c.Program, first) })
			b.Run("fragmented-udp/later", func(b *testing.B) { benchRun(b, c.Program, later) })
		})
	}
}

func benchRun(b *testing.B, prog *ebpf.Program, pkt []byte) {
	b.ResetTimer()
	_, d, err := prog.Benchmark(pkt, b.N, b.ResetTimer)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(d.Nanoseconds()), "ns/packet")
}

// BenchmarkPrivilegedClassifierQoS reports ns per packet for a pod whose EgressQoS marks it,
// alongside its firewall: the QoS lookup and counter. (Repeated runs reuse one buffer, so only
// the first rewrites the DSCP; later ones find it set.)
func BenchmarkPrivilegedClassifierQoS(b *testing.B) {
	c := load(b)
	st := &dataplane.ClassifierState{
		ClusterNetworks: pfxs("10.244.0.0/16"),
		Pods:            []dataplane.Pod{{Origin: dataplane.Origin{Kind: "Pod", Namespace: "q", Name: "p"}, IPs: []netip.Addr{podA}, QoSRules: []int{0, 1}}},
		Firewalls:       []dataplane.Firewall{{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: "q", Name: "default"}, Rules: benchRules(100)}},
		QoS: []dataplane.QoS{{Origin: dataplane.Origin{Kind: "EgressQoS", Namespace: "q", Name: "default"}, Rules: []dataplane.QoSRule{
			{Index: 0, DSCP: 46, Prefixes: pfxs("10.100.0.0/24")},
			{Index: 1, DSCP: 10, Prefixes: pfxs("0.0.0.0/0")},
		}}},
	}
	if failed := c.Apply(st, nil, nil); len(failed) > 0 {
		b.Fatal(failed)
	}
	marked := pkt(b, podA, netip.MustParseAddr("10.100.0.9"), "tcp", 443, 0, false) // allowed by rule 0
	if _, out := run(b, c, marked); out[15]>>2 != 46 {
		b.Fatalf("DSCP %d, want 46", out[15]>>2)
	}
	benchRun(b, c.Program, marked)
}

// benchFirstPacket runs the program once per iteration (the kernel times each run), having made
// every cached firewall decision stale through gen (when not nil) beforehand.
func benchFirstPacket(b *testing.B, prog *ebpf.Program, gen *ebpf.Map, pkt []byte) {
	var total time.Duration
	for i := range b.N {
		if gen != nil {
			if err := gen.Put(uint32(0), uint32(1<<20+i)); err != nil {
				b.Fatal(err)
			}
		}
		_, d, err := prog.Benchmark(pkt, 1, nil)
		if err != nil {
			b.Fatal(err)
		}
		total += d
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/packet")
}

// BenchmarkPrivilegedApply: one Apply of a node state with 1000 namespaces of 10 rules and one
// of 8000 (a sync after a one-rule change: everything is recomputed, one entry changes).
func BenchmarkPrivilegedApply(b *testing.B) {
	c := load(b)
	st := &dataplane.ClassifierState{ClusterNetworks: pfxs("10.244.0.0/16")}
	for i := range 1001 {
		ns := fmt.Sprintf("ns-%d", i)
		n := 10
		if i == 0 {
			n = 8000
		}
		st.Pods = append(st.Pods, dataplane.Pod{Origin: dataplane.Origin{Kind: "Pod", Namespace: ns, Name: "p"}, IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 244, byte(i / 250), byte(1 + i%250)})}})
		st.Firewalls = append(st.Firewalls, dataplane.Firewall{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: ns, Name: "default"}, Rules: benchRules(n)})
	}
	if failed := c.Apply(st, nil, nil); len(failed) > 0 {
		b.Fatal(failed)
	}
	last := &st.Firewalls[1].Rules[9]
	for b.Loop() {
		last.Deny = !last.Deny
		if failed := c.Apply(st, nil, nil); len(failed) > 0 {
			b.Fatal(failed)
		}
	}
}

// BenchmarkPrivilegedApplyNewPod: the classifier's part of a new pod's sync on a node whose
// state holds 1000 namespaces with EgressFirewalls of 10 rules (an unchanged list, as the
// compile step versions it) and 250 pods: one more pod per iteration.
func BenchmarkPrivilegedApplyNewPod(b *testing.B) {
	c := load(b)
	st := &dataplane.ClassifierState{ClusterNetworks: pfxs("10.244.0.0/16"), FirewallsVersion: 1}
	for i := range 1000 {
		ns := fmt.Sprintf("ns-%d", i)
		st.Firewalls = append(st.Firewalls, dataplane.Firewall{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: ns, Name: "default"}, Rules: benchRules(10)})
	}
	pod := func(i int) dataplane.Pod {
		return dataplane.Pod{Origin: dataplane.Origin{Kind: "Pod", Namespace: fmt.Sprintf("ns-%d", i%1000), Name: fmt.Sprintf("p%d", i)},
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 244, byte(i / 250), byte(1 + i%250)})}}
	}
	for i := range 250 {
		st.Pods = append(st.Pods, pod(i))
	}
	if failed := c.Apply(st, nil, nil); len(failed) > 0 {
		b.Fatal(failed)
	}
	base := len(st.Pods)
	i := 0
	for b.Loop() {
		st.Pods = append(st.Pods[:base], pod(base+i%10000))
		i++
		if failed := c.Apply(st, nil, nil); len(failed) > 0 {
			b.Fatal(failed)
		}
	}
}

// BenchmarkPrivilegedApplyNew8000: installing a new 8000-rule EgressFirewall for a namespace with
// a local pod, then removing it (each iteration writes and deletes every entry once).
func BenchmarkPrivilegedApplyNew8000(b *testing.B) {
	c := load(b)
	pod := dataplane.Pod{Origin: dataplane.Origin{Kind: "Pod", Namespace: "ns", Name: "p"}, IPs: []netip.Addr{podA}}
	with := &dataplane.ClassifierState{ClusterNetworks: pfxs("10.244.0.0/16"), Pods: []dataplane.Pod{pod},
		Firewalls: []dataplane.Firewall{{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: "ns", Name: "default"}, Rules: benchRules(8000)}}}
	without := &dataplane.ClassifierState{ClusterNetworks: with.ClusterNetworks, Pods: with.Pods}
	var install time.Duration
	for b.Loop() {
		start := time.Now()
		if failed := c.Apply(with, nil, nil); len(failed) > 0 {
			b.Fatal(failed)
		}
		install += time.Since(start)
		if failed := c.Apply(without, nil, nil); len(failed) > 0 {
			b.Fatal(failed)
		}
	}
	b.ReportMetric(float64(install.Milliseconds())/float64(b.N), "ms/install")
}

// BenchmarkPrivilegedClassifierSteer reports ns per packet for a pod with a routing mark and a
// firewall of 100 rules, to an allowed external destination (marked) and to a node address
// among 1000 exempt ones (not marked).
func BenchmarkPrivilegedClassifierSteer(b *testing.B) {
	c := load(b)
	st := &dataplane.ClassifierState{
		ClusterNetworks: pfxs("10.244.0.0/16"),
		Pods:            []dataplane.Pod{{Origin: dataplane.Origin{Kind: "Pod", Namespace: "s", Name: "p"}, IPs: []netip.Addr{podA}, Mark: 0x00010000}},
		Firewalls:       []dataplane.Firewall{{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: "s", Name: "default"}, Rules: benchRules(100)}},
	}
	st.SteerExempt = append(st.SteerExempt, st.ClusterNetworks...)
	for i := range 1000 {
		st.SteerExempt = append(st.SteerExempt, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 100, byte(50 + i/250), byte(1 + i%250)}), 32))
	}
	if failed := c.Apply(st, nil, nil); len(failed) > 0 {
		b.Fatal(failed)
	}
	marked := pkt(b, podA, netip.MustParseAddr("10.100.1.200"), "tcp", 443, 0, false) // allowed by rule 1
	exempt := pkt(b, podA, netip.MustParseAddr("10.100.51.9"), "tcp", 443, 0, false)  // allowed by rule 51
	if ret, mark := runMark(b, c, marked, 0); ret != tcxNext || mark != 0x00010000 {
		b.Fatalf("verdict %#x mark %#x, want next, 0x10000", ret, mark)
	}
	if ret, mark := runMark(b, c, exempt, 0); ret != tcxNext || mark != 0 {
		b.Fatalf("verdict %#x mark %#x, want next, 0", ret, mark)
	}
	b.Run("marked", func(b *testing.B) { benchRun(b, c.Program, marked) })
	b.Run("exempt", func(b *testing.B) { benchRun(b, c.Program, exempt) })
}

// BenchmarkPrivilegedApplyAtScale: the classifier's part of a sync on the egress node of make
// bench-scale's full size after one EgressFirewall changed: 30 local pods in 30 namespaces
// with firewalls of 10 rules, the cluster's 1,000 EgressQoS (two rules each), 5,000 node
// addresses exempt from steering.
func BenchmarkPrivilegedApplyAtScale(b *testing.B) {
	c := load(b)
	st := &dataplane.ClassifierState{ClusterNetworks: pfxs("10.244.0.0/16", "10.96.0.0/16")}
	for i := range 30 {
		ns := fmt.Sprintf("ns-%d", i)
		st.Pods = append(st.Pods, dataplane.Pod{Origin: dataplane.Origin{Kind: "Pod", Namespace: ns, Name: "p"},
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 244, 0, byte(2 + i)})}})
		st.Firewalls = append(st.Firewalls, dataplane.Firewall{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: ns, Name: "default"}, Rules: benchRules(10)})
	}
	for i := range 1000 {
		st.QoS = append(st.QoS, dataplane.QoS{Origin: dataplane.Origin{Kind: "EgressQoS", Namespace: fmt.Sprintf("ns-%d", i), Name: "default"},
			Rules: []dataplane.QoSRule{{Index: 0, DSCP: 46, Prefixes: pfxs(fmt.Sprintf("198.19.%d.0/24", i%256)), Text: "46 to 198.19.0.0/24"},
				{Index: 1, DSCP: 10, Prefixes: pfxs("0.0.0.0/0", "::/0"), Text: "10"}}})
	}
	for i := range 5000 {
		st.SteerExempt = append(st.SteerExempt, netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 20, byte(i / 250), byte(i%250 + 1)}), 32))
	}
	if failed := c.Apply(st, nil, nil); len(failed) > 0 {
		b.Fatal(failed)
	}
	last := &st.Firewalls[0].Rules[8]
	for b.Loop() {
		last.Deny = !last.Deny
		st.FirewallsVersion++
		if failed := c.Apply(st, nil, nil); len(failed) > 0 {
			b.Fatal(failed)
		}
	}
}
