package classifier

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/egressd/egressd/bpf"
	"github.com/egressd/egressd/dataplane"
)

// TestPodEntries: each pod address gets its namespace's firewall id and log flags, its mark
// and spread, the interface facing it and its bridge port; a mark outside the mark mask fails
// the pod and leaves the mark it had (fail closed); pods selected by the same QoS rules share a
// class, whose entries carry each prefix's first rule's DSCP; a failed EgressQoS fails and its
// class's entries stay as written.
func TestPodEntries(t *testing.T) {
	ip := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	podA := dataplane.Origin{Kind: "Pod", Namespace: "qa", Name: "a"}
	podB := dataplane.Origin{Kind: "Pod", Namespace: "qa", Name: "b"}
	podC := dataplane.Origin{Kind: "Pod", Namespace: "bad", Name: "c"}
	qosBad := dataplane.Origin{Kind: "EgressQoS", Namespace: "bad", Name: "default"}
	c := &Classifier{markMask: 0x00ff0000, written: content{pods: map[bpf.FromPodAddr]bpf.FromPodPodInfo{
		addrOf(ip("10.0.0.2")): {Mark: 0x00010000},
	}}}
	a := newIDs()
	fws := firewalls{ids: map[string]nsID{"qa": a.namespace("qa")}, log: map[string]uint8{"qa": logAllow}}
	s := &dataplane.ClassifierState{
		Pods: []dataplane.Pod{
			{Origin: podA, IPs: []netip.Addr{ip("10.0.0.2"), ip("fd00::2")}, Mark: 0x01010000, QoSRules: []int{0, 1}},
			{Origin: podB, IPs: []netip.Addr{ip("10.0.0.3")}, Mark: 0x00020000, Spread: 3, QoSRules: []int{0, 1}},
			{Origin: podC, IPs: []netip.Addr{ip("10.0.1.4")}, QoSRules: []int{0}},
		},
		QoS: []dataplane.QoS{
			{Origin: dataplane.Origin{Kind: "EgressQoS", Namespace: "qa", Name: "default"}, Rules: []dataplane.QoSRule{
				{Index: 0, DSCP: 46, Prefixes: pfx("192.0.2.0/24")}, {Index: 1, DSCP: 10, Prefixes: pfx("192.0.2.0/24", "0.0.0.0/0")}, {Index: 2, DSCP: 8, Prefixes: pfx("198.51.100.0/24")}}},
			{Origin: qosBad, Err: errors.New("bad CIDR")},
		},
	}
	want, failed := newContent(), map[dataplane.Origin]error{}
	facing := map[netip.Addr]int{ip("10.0.0.2"): 20, ip("fd00::2"): 20, ip("10.0.0.3"): 21}
	keep := c.pods(s, a, fws, facing, map[netip.Addr]int{ip("10.0.0.2"): 31}, &want, failed)

	pa, pa6, pb := want.pods[addrOf(ip("10.0.0.2"))], want.pods[addrOf(ip("fd00::2"))], want.pods[addrOf(ip("10.0.0.3"))]
	if pa.Mark != 0x00010000 || pa6.Mark != 0 || failed[podA] == nil {
		t.Errorf("a mark outside the mask: marks %#x, %#x, failure %v; want the written mark kept, the pod failed", pa.Mark, pa6.Mark, failed[podA])
	}
	if pb.Mark != 0x00020000 || pb.Spread != 3 || failed[podB] != nil {
		t.Errorf("pod b: %+v (%v), want its mark and spread", pb, failed[podB])
	}
	if pa.NsId != uint32(fws.ids["qa"]) || pa.Log != logAllow || pa.Ifindex != 20 || pa.Port != 31 || pb.Ifindex != 21 || pb.Port != 0 {
		t.Errorf("pod entries %+v, %+v: want qa's id and log flags, facing 20/21, port 31/none", pa, pb)
	}
	if pa.QosClass == 0 || pa.QosClass != pb.QosClass || pa6.QosClass != pa.QosClass {
		t.Errorf("classes %d, %d, %d: want one shared", pa.QosClass, pa6.QosClass, pb.QosClass)
	}
	class := qosClass(pa.QosClass)
	if v := want.qos[lpmKey(class, netip.MustParsePrefix("192.0.2.0/24"))]; v.Dscp != 46 || v.Rule != 0 {
		t.Errorf("192.0.2.0/24: %+v, want rule 0's DSCP 46", v)
	}
	if v := want.qos[lpmKey(class, netip.MustParsePrefix("0.0.0.0/0"))]; v.Dscp != 10 || v.Rule != 1 || len(want.qos) != 2 {
		t.Errorf("0.0.0.0/0: %+v (%d entries), want rule 1's DSCP 10, and nothing of rule 2, which selects no pod", v, len(want.qos))
	}
	cc := qosClass(want.pods[addrOf(ip("10.0.1.4"))].QosClass)
	if !errors.Is(failed[qosBad], s.QoS[1].Err) || !keep[cc] || keep[class] {
		t.Errorf("failed EgressQoS: failure %v, kept classes %v; want bad's class kept", failed[qosBad], keep)
	}
}

// TestKeepFailed: the written entries of failed policies are carried into what is wanted
// (fail closed); those of others are replaced by what is wanted.
func TestKeepFailed(t *testing.T) {
	k := func(id uint32, p string) bpf.FromPodLpmKey { return lpmKey(qosClass(id), netip.MustParsePrefix(p)) }
	written := map[bpf.FromPodLpmKey]bpf.FromPodQosValue{k(1, "0.0.0.0/0"): {Dscp: 46}, k(2, "0.0.0.0/0"): {Dscp: 8}, k(1, "::/0"): {Dscp: 46}}
	want := map[bpf.FromPodLpmKey]bpf.FromPodQosValue{k(2, "10.0.0.0/8"): {Dscp: 10}}
	keepFailed(written, want, map[qosClass]bool{1: true}, lpmID)
	if len(want) != 3 || want[k(1, "::/0")].Dscp != 46 || want[k(1, "0.0.0.0/0")].Dscp != 46 {
		t.Errorf("wanted %v: want class 1's written entries and class 2's new one", want)
	}
}
