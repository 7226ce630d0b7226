package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

const denyAll = `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
  - {type: Deny, to: {cidrSelector: "::/0"}}`

// sinkLab starts a lab with an external sink counting UDP datagrams to 203.0.113.10:9000, a
// namespace under Deny 0.0.0.0/0 and an unrestricted one.
func sinkLab(t *testing.T, o lab.Options) (l *lab.Lab, count func() uint64, denied, open string) {
	t.Helper()
	l = lab.New(t, o)
	sink, err := l.AddExternal("sink", lab.ExternalOptions{}, "203.0.113.10")
	if err != nil {
		t.Fatal(err)
	}
	if count, err = sink.CountUDP(9000); err != nil {
		t.Fatal(err)
	}
	denied, open = l.CP.Namespace(t), l.CP.Namespace(t)
	applyFirewall(t, l, denied, denyAll)
	return l, count, denied, open
}

// settled waits until the sink's count stops moving (datagrams of an earlier flood still being
// read) and returns it, so that a later difference counts only what came after.
func settled(count func() uint64) uint64 {
	last := count()
	for stable := time.Now(); time.Since(stable) < 300*time.Millisecond; time.Sleep(50 * time.Millisecond) {
		if c := count(); c != last {
			last, stable = c, time.Now()
		}
	}
	return last
}

// floodOnStart starts flooding UDP from the pod to dst the instant its CNI ADD returned, for d;
// wait returns how many datagrams it sent.
func floodOnStart(t *testing.T, dst string, d time.Duration) (func(*lab.Pod), func() uint64) {
	var wg sync.WaitGroup
	var sent uint64
	start := func(p *lab.Pod) {
		wg.Go(func() {
			n, err := p.FloodUDP(dst, d)
			if err != nil {
				t.Errorf("flood from %s/%s: %v", p.Namespace, p.Name, err)
			}
			sent = n
		})
	}
	return start, func() uint64 { wg.Wait(); return sent }
}

// TestPrivilegedCNIFirstPacketDenied: a pod that sends from the instant its CNI ADD returns, in
// a namespace under Deny 0.0.0.0/0, gets no packet out, on the routed and the bridged CNI;
// the same pod without egressd-cni in the chain leaks on the routed CNI (egressd learns it from
// the API only later) and is dropped as an unknown source on the bridged one, and a pod of an unrestricted namespace gets through (the flood works). CHECK agrees
// with what egressd holds; DEL and a second DEL succeed.
func TestPrivilegedCNIFirstPacketDenied(t *testing.T) {
	privileged.Require(t)
	l, count, denied, open := sinkLab(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	ctx := context.Background()
	const d = 300 * time.Millisecond
	for _, n := range l.Nodes {
		// Under the firewall, through egressd-cni: nothing gets out.
		start, sent := floodOnStart(t, "203.0.113.10:9000", d)
		before := count()
		p, err := n.AddPod(ctx, denied, "first-"+n.Name, lab.PodOptions{Started: start})
		if err != nil {
			t.Fatal(err)
		}
		s := sent()
		time.Sleep(200 * time.Millisecond) // the last datagrams drain
		if got := count() - before; got != 0 || s == 0 {
			t.Errorf("%s (%s): %d of %d datagrams sent from the instant ADD returned reached the sink, want 0 (of some)", p.Name, n.CNI, got, s)
		} else {
			t.Logf("%s (%s CNI): 0 of %d datagrams out; ADD %s, egressd-cni %s", p.Name, n.CNI, s, p.CNIAdd.Round(time.Microsecond), p.CNIPlugins["egressd-cni ADD"].Round(time.Microsecond))
		}
		if err := p.CheckNetwork(ctx); err != nil {
			t.Errorf("CNI CHECK of %s: %v", p.Name, err)
		}
		series := `egressd_cni_add_duration_seconds_count{result="programmed"}`
		if v, err := n.Agent.Sample(series); err != nil || v == "" || v == "0" {
			t.Errorf("%s on %s = %q (%v), want the ADD counted", series, n.Name, v, err)
		}

		// The same without the plugin: on the routed CNI the first packets leave before egressd
		// knows the pod (its new veth is not attached yet); on the bridged one the bridge is
		// checked already, and a source no known pod has is dropped (anti-spoofing) until
		// egressd learns the pod from the API.
		start, sent = floodOnStart(t, "203.0.113.10:9000", d)
		before = count()
		spoofed := spoofCounts(t, n)["unknown_source"]
		if _, err := n.AddPod(ctx, denied, "api-only-"+n.Name, lab.PodOptions{Started: start, WithoutEgressdCNI: true}); err != nil {
			t.Fatal(err)
		}
		s = sent()
		time.Sleep(200 * time.Millisecond)
		leaked := count() - before
		t.Logf("without egressd-cni on %s (%s CNI): %d of %d datagrams leaked", n.Name, n.CNI, leaked, s)
		switch dropped := spoofCounts(t, n)["unknown_source"] - spoofed; {
		case n.CNI == lab.Routed && leaked == 0:
			t.Errorf("without egressd-cni on %s: no datagram leaked; the test does not show what the plugin closes", n.Name)
		case n.CNI.Bridges() && (leaked != 0 || dropped == 0):
			t.Errorf("without egressd-cni on %s (bridged): %d datagrams leaked, %d dropped as unknown sources; want none leaked, some dropped", n.Name, leaked, dropped)
		}

		// An unrestricted namespace: the flood reaches the sink.
		start, sent = floodOnStart(t, "203.0.113.10:9000", d)
		before = count()
		if _, err := n.AddPod(ctx, open, "open-"+n.Name, lab.PodOptions{Started: start}); err != nil {
			t.Fatal(err)
		}
		s = sent()
		poll.Eventually(t, "the open namespace's flood arrives", 5*time.Second, func() error {
			if got := count() - before; got == 0 {
				return fmt.Errorf("0 of %d datagrams arrived", s)
			}
			return nil
		})

		// DEL is idempotent.
		if err := p.Delete(ctx); err != nil {
			t.Errorf("delete %s: %v", p.Name, err)
		}
		if err := p.Delete(ctx); err != nil && !strings.Contains(err.Error(), "not found") {
			t.Errorf("second delete (CNI DEL again) of %s: %v", p.Name, err)
		}
	}
}

// TestPrivilegedCNIFirstPacketEgressIP: a pod selected by an EgressIP sends its first datagram
// the instant its CNI ADD returns, and it leaves with the egress IP: on the egress node itself
// (bridged), and from another node (routed), whose agent steers it and has announced the pod to
// the egress node's agent before the ADD returned (nodeagent/podannounce).
func TestPrivilegedCNIFirstPacketEgressIP(t *testing.T) {
	privileged.Require(t)
	empty := ""
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true,
		NodeLabels: map[int]map[string]string{1: {assignable: empty}}})
	ctx := context.Background()
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10"); err != nil {
		t.Fatal(err)
	}
	ns := egressNamespace(t, l)
	name := "eip-" + ns
	createEgressIP(t, l, name, "eip", eip4)
	waitItems(t, l, name, l.Nodes[1].Name+"="+eip4)
	// The egress node is ready: a pod selected before serves as a witness.
	witness := addPod(t, l.Nodes[0], ns, "witness", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	eventuallySource(t, "witness", witness, "203.0.113.10:80", netip.MustParseAddr(eip4))

	for _, n := range l.Nodes {
		var first lab.Result
		p, err := n.AddPod(ctx, ns, "first-"+n.Name, lab.PodOptions{Labels: map[string]string{"app": "eip"},
			Started: func(p *lab.Pod) { first = p.UDP("203.0.113.10:80", lab.ClientOptions{Timeout: quick}) }})
		if err != nil {
			t.Fatal(err)
		}
		if first.Outcome != lab.OK || first.Seen.Src != netip.MustParseAddr(eip4) {
			t.Errorf("first datagram of %s (%s CNI): %s, want it to leave with %s", p.Name, n.CNI, first, eip4)
		} else {
			t.Logf("first datagram of %s (%s CNI): %s; ADD %s", p.Name, n.CNI, first, p.CNIAdd.Round(time.Microsecond))
		}
	}
	series := `egressd_pod_announcements_total{direction="received",result="served"}`
	if v, err := l.Nodes[1].Agent.Sample(series); err != nil || v == "" || v == "0" {
		t.Errorf("egress node: %s = %q (%v), want the announcement of node-0's pod", series, v, err)
	}
}

// TestPrivilegedCNIFirstPacketDSCP: a pod selected by an EgressQoS sends its first datagram
// the instant its CNI ADD returns, and the external server sees it with the rule's DSCP (and
// the sender's ECN bits kept), on the routed and the bridged CNI.
func TestPrivilegedCNIFirstPacketDSCP(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	ctx := context.Background()
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10"); err != nil {
		t.Fatal(err)
	}
	ns := l.CP.Namespace(t)
	applyQoS(t, l, ns, `
  - {dscp: 46, dstCIDR: 203.0.113.0/24, podSelector: {matchLabels: {app: voice}}}`)
	for _, n := range l.Nodes {
		var first lab.Result
		p, err := n.AddPod(ctx, ns, "first-"+n.Name, lab.PodOptions{Labels: map[string]string{"app": "voice"},
			Started: func(p *lab.Pod) { first = p.UDP("203.0.113.10:80", lab.ClientOptions{Timeout: quick, TOS: 1}) }})
		if err != nil {
			t.Fatal(err)
		}
		if first.Outcome != lab.OK || first.Seen.DSCP != 46 || first.Seen.ECN != 1 {
			t.Errorf("first datagram of %s (%s CNI): %s, ECN %d; want DSCP 46 with ECN 1", p.Name, n.CNI, first, first.Seen.ECN)
		} else {
			t.Logf("first datagram of %s (%s CNI): %s; ADD %s", p.Name, n.CNI, first, p.CNIAdd.Round(time.Microsecond))
		}
	}
}

// TestPrivilegedCNIFailClosed: with egressd down, the ADD of a pod fails (egressd-cni fails
// closed, CNI error 11, try again later) and leaves nothing behind; it succeeds once egressd is
// back, the new egressd answering within its first sync, under the firewall. With failOpen set
// in the plugin's config the ADD succeeds while egressd is down.
func TestPrivilegedCNIFailClosed(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 1, Agents: true})
	ctx := context.Background()
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10"); err != nil {
		t.Fatal(err)
	}
	ns := l.CP.Namespace(t)
	applyFirewall(t, l, ns, denyAll)
	n := l.Nodes[0]
	n.Agent.Kill()

	start := time.Now()
	_, err := n.AddPod(ctx, ns, "p", lab.PodOptions{CNITimeout: time.Second})
	var cerr *types.Error
	if err == nil {
		t.Fatal("ADD succeeded with egressd down, want it to fail closed")
	}
	if !errors.As(err, &cerr) || cerr.Code != types.ErrTryAgainLater {
		t.Fatalf("ADD with egressd down: %v, want CNI error %d", err, types.ErrTryAgainLater)
	}
	t.Logf("ADD with egressd down failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if _, err := l.Client.CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{}); err == nil {
		t.Errorf("the failed pod's object is still there")
	}

	open, err := n.AddPod(ctx, ns, "open", lab.PodOptions{CNITimeout: time.Second, CNIFailOpen: true})
	if err != nil {
		t.Fatalf("ADD with failOpen and egressd down: %v", err)
	}

	// egressd comes back: the ADD, tried again at once (as the runtime retries the sandbox),
	// waits for its first sync.
	restarted := make(chan error, 1)
	go func() { restarted <- n.StartAgent(ctx) }()
	var p *lab.Pod
	poll.Eventually(t, "the ADD succeeds once egressd is back", 60*time.Second, func() error {
		var err error
		p, err = n.AddPod(ctx, ns, "p", lab.PodOptions{CNITimeout: 5 * time.Second})
		return err
	})
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	if r := p.UDP("203.0.113.10:80", lab.ClientOptions{Timeout: quick}); r.Outcome == lab.OK {
		t.Errorf("pod added after the restart: %s, want it denied", r)
	}
	poll.Eventually(t, "the fail-open pod is under the firewall once egressd is back", 10*time.Second,
		reach{open, "203.0.113.10:80", true, lab.Timeout}.check)
}
