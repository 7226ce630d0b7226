package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressIPCiliumIdentityMark: with Cilium's default enableIdentityMark, its
// cil_from_container, after egressd's classifier on a pod's veth, writes the pod's security
// identity over the packet mark egressd steers with. The agent finds it when it attaches there
// and says so in a metric and an Event on its Node. (What the packet then does depends on the
// identity Cilium allocated: its bits under egressd's mask are no mark, and the guard drops
// it, or another steering mark, whose path it takes.)
func TestPrivilegedEgressIPCiliumIdentityMark(t *testing.T) {
	privileged.Require(t)
	ciliumConflictLab(t, "cil_from_container", "enable_identity_mark", "1 pod interfaces", "--enable-identity-mark=true")
}

// TestPrivilegedEgressIPCiliumBPFHostRouting: with Cilium's BPF host routing (kube-proxy
// replacement and BPF masquerading on, bpf.hostLegacyRouting false), cil_from_container sends
// a pod's packets to eth0 past the host's routing and netfilter, where egressd steers. The
// agent finds it and says so in a metric and an Event on its Node.
func TestPrivilegedEgressIPCiliumBPFHostRouting(t *testing.T) {
	privileged.Require(t)
	pod := ciliumConflictLab(t, "cil_from_container", "enable_bpf_host_routing", "1 pod interfaces", append(lab.CiliumKubeProxyReplacement(),
		"--enable-bpf-masquerade=true", "--enable-host-legacy-routing=false")...)
	// What the docs say of this setting, shown: not steered, so not from the egress IP.
	r := pod.TCP("203.0.113.10:80", lab.ClientOptions{Timeout: quick})
	t.Logf("the steered pod's connection with BPF host routing: %s", r)
	if r.Outcome == lab.OK && r.Seen.Src.String() == eip4 {
		t.Errorf("steered through BPF host routing: %s; the docs and the Event say it is not", r)
	}
}

// TestPrivilegedEgressIPCiliumBPFMasquerade: with Cilium's BPF masquerading (and kube-proxy
// replacement, legacy host routing), cil_to_netdev masquerades what leaves eth0, after
// egressd's steering and source NAT: the steered pod's traffic leaves with the node's address.
// No loaded program says so (the setting is compiled in); the agent finds it in the node
// configuration Cilium built its programs with, and says so in a metric and an Event on its
// Node.
func TestPrivilegedEgressIPCiliumBPFMasquerade(t *testing.T) {
	privileged.Require(t)
	pod := ciliumConflictLab(t, "cil_to_netdev", "ENABLE_MASQUERADE_IPV4", "1 node (its node_config.h)", lab.CiliumBPFMasquerade()...)
	r := pod.TCP("203.0.113.10:80", lab.ClientOptions{Timeout: quick})
	t.Logf("the steered pod's connection with BPF masquerading: %s", r)
	if r.Outcome == lab.OK && r.Seen.Src.String() == eip4 {
		t.Errorf("steered past BPF masquerading: %s; the docs and the Event say it is not", r)
	}
}

// ciliumConflictLab runs two Cilium nodes with the agent flags ciliumArgs, a pod on node-0
// selected by an EgressIP on node-1, and waits for node-0's agent to report the setting of
// Cilium's program, found at where, in its metric and a Node Event.
func ciliumConflictLab(t *testing.T, program, setting, where string, ciliumArgs ...string) *lab.Pod {
	t.Helper()
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{0: lab.Cilium, 1: lab.Cilium}, Agents: true,
		CiliumArgs: ciliumArgs, NodeLabels: map[int]map[string]string{1: {assignable: ""}}})
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10"); err != nil {
		t.Fatal(err)
	}
	n0, n1 := l.Nodes[0], l.Nodes[1]
	ns := egressNamespace(t, l)
	pod := addPod(t, n0, ns, "steered", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	createEgressIP(t, l, "eip-"+ns, "eip", eip4)
	waitItems(t, l, "eip-"+ns, n1.Name+"="+eip4)

	waitConflict(t, l, n0, program, setting, where)
	return pod
}

// waitConflict waits for n's agent to report the setting of Cilium's program, found at where
// ("1 pod interfaces"), in its metric and an Event on its Node.
func waitConflict(t *testing.T, l *lab.Lab, n *lab.Node, program, setting, where string) {
	t.Helper()
	series := fmt.Sprintf(`egressd_cni_conflicts{program=%q,setting=%q}`, program, setting)
	count, _, _ := strings.Cut(where, " ")
	poll.Eventually(t, "the agent on "+n.Name+" reports Cilium's "+setting, 20*time.Second, func() error {
		if got := sample(t, n, series); fmt.Sprint(got) != count {
			return fmt.Errorf("%s = %v, want %s", series, got, count)
		}
		return nil
	})
	want := program + " with " + setting + " on " + where
	waitEventFor(t, l.Client, "", "involvedObject.name="+n.Name, "event CNIConflict on Node "+n.Name, func(e corev1.Event) bool {
		return e.Reason == "CNIConflict" && e.Type == "Warning" && e.InvolvedObject.Kind == "Node" && strings.Contains(e.Message, want)
	})
}

// TestPrivilegedEgressServiceCiliumWildcards: with Cilium's kube-proxy replacement and its
// default wildcard service entries, cil_from_netdev drops every packet to a load-balancer IP on
// a port no Service has: the replies to an EgressService's endpoints SNATed to that IP. The host
// node's agent finds the entry and says so in a metric and an Event on its Node; with the
// entries off (the lab's cilium-kpr), the same traffic passes.
func TestPrivilegedEgressServiceCiliumWildcards(t *testing.T) {
	privileged.Require(t)
	for _, wildcards := range []bool{true, false} {
		t.Run(fmt.Sprintf("wildcards=%v", wildcards), func(t *testing.T) {
			l := lab.New(t, lab.Options{Nodes: 1, CNI: map[int]lab.CNI{0: lab.Cilium}, Agents: true, KubeProxy: lab.KubeProxyNone,
				CiliumArgs: append(lab.CiliumKubeProxyReplacement(), fmt.Sprintf("--bpf-lb-enable-wildcard-entries=%v", wildcards)),
				NodeLabels: map[int]map[string]string{0: {"egress-host": "yes"}}})
			web, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10")
			if err != nil {
				t.Fatal(err)
			}
			n0 := l.Nodes[0]
			lb := netip.MustParseAddr(lbIP4)
			routeLB(t, web, n0, lb)
			ns := l.CP.Namespace(t)
			ep := addPod(t, n0, ns, "ep", lab.PodOptions{Labels: map[string]string{"app": "lb"}})
			loadBalancerEgressService(t, l, ns, "", lbIP4)
			if !wildcards {
				eventuallySource(t, "endpoint, without wildcard entries", ep, "203.0.113.10:80", lb)
				if got := sample(t, n0, `egressd_cni_conflicts{program="cil_from_netdev",setting="bpf-lb-enable-wildcard-entries"}`); got != 0 {
					t.Errorf("wildcard entries off, yet the agent reports %v", got)
				}
				// Cilium attached its program to ep's veth after the CNI ADD and deleted the
				// hook's filters: egressd's classifier, a tcx link from the start, stayed.
				if got := sample(t, n0, "egressd_classifier_reattached_total"); got != 0 {
					t.Errorf("egressd's classifier was attached again %v times: Cilium deleted it from a pod's veth", got)
				}
				// The matrix's cilium-kpr: iptables masquerading, which egressd's SNAT precedes.
				if got := sample(t, n0, `egressd_cni_conflicts{program="cil_to_netdev",setting="ENABLE_MASQUERADE_IPV4"}`); got != 0 {
					t.Errorf("BPF masquerading off, yet the agent reports it on %v", got)
				}
				return
			}
			waitConflict(t, l, n0, "cil_from_netdev", "bpf-lb-enable-wildcard-entries", "1 source NAT addresses")
			if r := ep.TCP("203.0.113.10:80", lab.ClientOptions{Timeout: quick}); r.Outcome != lab.Timeout {
				t.Errorf("endpoint with wildcard entries: %s; the docs and the Event say its replies are dropped", r)
			}
		})
	}
}
