package classifier_test

import (
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/test/privileged"
)

// skbHead is struct __sk_buff (192 bytes, the size BPF_PROG_TEST_RUN writes back) with the
// fields before mark, which must be zero going in, and mark named.
type skbHead struct {
	Len, PktType, Mark uint32
	Rest               [192 - 12]byte
}

// runMark runs the program on data with skb->mark = mark and returns its verdict and the mark
// it leaves.
func runMark(t testing.TB, c *classifier.Classifier, data []byte, mark uint32) (uint32, uint32) {
	t.Helper()
	var out skbHead
	opts := ebpf.RunOptions{Data: data, DataOut: make([]byte, len(data)+64), Context: skbHead{Mark: mark}, ContextOut: &out}
	ret, err := c.Program.Run(&opts)
	if err != nil {
		t.Fatal(err)
	}
	return ret, out.Mark
}

var (
	nodeAddr = netip.MustParseAddr("192.168.1.10")
	podAOrig = dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "pa"}
)

// steerState: pod A (namespace a, whose firewall is firewallState's) has mark 0x00010000, pod
// B (no firewall) 0x00020000; cluster networks and a node address are exempt.
func steerState() *dataplane.ClassifierState {
	st := firewallState()
	st.Pods[0].Mark = 0x00010000
	st.Pods[1].Mark = 0x00020000
	st.SteerExempt = append(append([]netip.Prefix{}, st.ClusterNetworks...), netip.PrefixFrom(nodeAddr, 32))
	return st
}

type markCase struct {
	name          string
	src           netip.Addr
	dst           string
	proto         string
	port          uint16
	in            uint32
	verdict, mark uint32
}

func checkMarks(t *testing.T, c *classifier.Classifier, cases []markCase) {
	t.Helper()
	for _, tc := range cases {
		ret, mark := runMark(t, c, pkt(t, tc.src, netip.MustParseAddr(tc.dst), tc.proto, tc.port, 0, false), tc.in)
		if ret != tc.verdict || mark != tc.mark {
			t.Errorf("%s: verdict %#x mark %#x, want verdict %#x mark %#x", tc.name, ret, mark, tc.verdict, tc.mark)
		}
	}
}

// TestPrivilegedClassifierSteerMark: a pod's mark is set, within the mask only, on the packets
// the firewall lets through to destinations that are not exempt.
func TestPrivilegedClassifierSteerMark(t *testing.T) {
	c := load(t)
	if failed := c.Apply(steerState(), nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	checkMarks(t, c, []markCase{
		{"allowed external destination is marked", podA, "198.51.100.7", "udp", 53, 0, tcxNext, 0x00010000},
		{"v6 allowed external destination is marked", podA6, "2001:db8::1", "tcp", 443, 0, tcxNext, 0x00010000},
		{"marks outside the mask are kept", podA, "198.51.100.7", "udp", 53, 0x80004000, tcxNext, 0x80014000},
		{"marks inside the mask are replaced", podA, "198.51.100.7", "udp", 53, 0x00334000, tcxNext, 0x00014000},
		{"denied packet is dropped, never marked", podA, "203.0.113.1", "tcp", 443, 0x4000, tcxDrop, 0x4000},
		{"cluster destination is exempt", podA, "10.244.3.9", "tcp", 80, 0x4000, tcxNext, 0x4000},
		{"service destination is exempt", podA, "10.96.0.10", "udp", 53, 0, tcxNext, 0},
		{"v6 cluster destination is exempt", podA6, "fd00:10:244:1::7", "udp", 53, 0, tcxNext, 0},
		{"v6 link-local destination is exempt", podA6, "fe80::1", "icmp", 0, 0, tcxNext, 0},
		{"node address is exempt", podB, nodeAddr.String(), "tcp", 10250, 0, tcxNext, 0},
		{"pod without firewall is marked", podB, "203.0.113.1", "tcp", 443, 0xc00, tcxNext, 0x00020c00},
		{"unknown source untouched", netip.MustParseAddr("10.244.9.9"), "203.0.113.1", "tcp", 443, 0x00330000, tcxNext, 0x00330000},
	})

	in, err := classifier.Inspect(fmt.Sprintf("/sys/fs/bpf/egressd-test-classifier-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for dst, want := range map[string]uint32{"198.51.100.7": 0x00010000, "10.244.3.9": 0, "203.0.113.1": 0} {
		if tr, err := in.Trace(podA, netip.MustParseAddr(dst), 17, 53); err != nil || tr.Mark != want {
			t.Errorf("trace to %s: mark %#x (%v), want %#x", dst, tr.Mark, err, want)
		}
	}

	// A mark outside the mask is refused for that pod alone, which keeps the mark it had.
	bad := steerState()
	bad.Pods[0].Mark = 0x01000000
	bad.Pods[1].Mark = 0x00030000
	failed := c.Apply(bad, nil, nil)
	if failed[podAOrig] == nil || len(failed) != 1 {
		t.Fatalf("failures %v, want one for %v", failed, podAOrig)
	}
	checkMarks(t, c, []markCase{
		{"refused mark: the previous one stays", podA, "198.51.100.7", "udp", 53, 0, tcxNext, 0x00010000},
		{"other pods' marks change", podB, "203.0.113.1", "tcp", 443, 0, tcxNext, 0x00030000},
	})

	// No mark: nothing set; an exemption removed: marked there.
	none := steerState()
	none.Pods[0].Mark = 0
	none.SteerExempt = none.ClusterNetworks
	if failed := c.Apply(none, nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	checkMarks(t, c, []markCase{
		{"mark removed", podA, "198.51.100.7", "udp", 53, 0x4000, tcxNext, 0x4000},
		{"node address no longer exempt", podB, nodeAddr.String(), "tcp", 10250, 0, tcxNext, 0x00020000},
	})
}

// TestPrivilegedClassifierSteerMarkMask: the mask set at load is the program's; marks outside
// it are refused.
func TestPrivilegedClassifierSteerMarkMask(t *testing.T) {
	c := loadWith(t, classifier.Options{MarkMask: 0x0000ff00})
	st := steerState()
	st.Pods[0].Mark = 0x0100
	st.Pods[1].Mark = 0x00020000 // outside this mask
	failed := c.Apply(st, nil, nil)
	if origin := st.Pods[1].Origin; failed[origin] == nil || len(failed) != 1 {
		t.Fatalf("failures %v, want one for %v", failed, origin)
	}
	checkMarks(t, c, []markCase{
		{"bits outside the mask kept", podA, "198.51.100.7", "udp", 53, 0x00ff0000, tcxNext, 0x00ff0100},
		{"bits inside the mask replaced", podA, "198.51.100.7", "udp", 53, 0x0000ff00, tcxNext, 0x00000100},
		{"refused mark never set", podB, "203.0.113.1", "tcp", 443, 0, tcxNext, 0},
	})
}

// TestPrivilegedClassifierSteerAdopted: a restarted agent keeps steering with what its
// predecessor wrote, and its first Apply removes exemptions no longer wanted.
func TestPrivilegedClassifierSteerAdopted(t *testing.T) {
	privileged.Require(t)
	root := fmt.Sprintf("/sys/fs/bpf/egressd-test-steer-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(root) })
	c, err := classifier.Load(root, classifier.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if failed := c.Apply(steerState(), nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	c.Close()
	c2, err := classifier.Load(root, classifier.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	checkMarks(t, c2, []markCase{
		{"adopted mark", podB, "203.0.113.1", "tcp", 443, 0, tcxNext, 0x00020000},
		{"adopted exemption", podB, nodeAddr.String(), "tcp", 10250, 0, tcxNext, 0},
	})
	st := steerState()
	st.SteerExempt = st.ClusterNetworks
	if failed := c2.Apply(st, nil, nil); len(failed) > 0 {
		t.Fatal(failed)
	}
	checkMarks(t, c2, []markCase{
		{"adopted exemption removed", podB, nodeAddr.String(), "tcp", 10250, 0, tcxNext, 0x00020000},
	})
}
