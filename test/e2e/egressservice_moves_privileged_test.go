package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// labelWatch records, from a watch on Nodes, the most nodes that carried label at once.
type labelWatch struct {
	mu      sync.Mutex
	holders map[string]bool
	most    int
	seen    []string
	stop    func()
}

func watchLabel(t *testing.T, l *lab.Lab, label string) *labelWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	list, err := l.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := &labelWatch{holders: map[string]bool{}, stop: cancel}
	for _, n := range list.Items {
		if _, ok := n.Labels[label]; ok {
			w.holders[n.Name] = true
		}
	}
	w.most = len(w.holders)
	wi, err := l.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			n, ok := ev.Object.(interface {
				GetName() string
				GetLabels() map[string]string
			})
			if !ok || ev.Type == watch.Error {
				continue
			}
			_, has := n.GetLabels()[label]
			w.mu.Lock()
			if has != w.holders[n.GetName()] {
				w.seen = append(w.seen, fmt.Sprintf("%s=%v", n.GetName(), has))
			}
			w.holders[n.GetName()] = has && ev.Type != watch.Deleted
			c := 0
			for _, h := range w.holders {
				if h {
					c++
				}
			}
			w.most = max(w.most, c)
			w.mu.Unlock()
		}
	}()
	t.Cleanup(cancel)
	return w
}

// check fails when more than one node carried the label at once since the watch started.
func (w *labelWatch) check(t *testing.T, step string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.most > 1 {
		t.Errorf("%s: %d nodes carried the label at once; changes seen: %v", step, w.most, w.seen)
	}
	w.most = 0
	for _, h := range w.holders {
		if h {
			w.most++
		}
	}
}

// TestPrivilegedEgressServiceMoves: ETP=Local puts the host on the node of the endpoint and moves
// it with the endpoint; a nodeSelector change moves the host with exactly one node labelled at any
// time while endpoints stream to the external host, which never sees a pod address nor another
// source than the LB IP from them (and an endpoint whose SNAT the host lacks is dropped there, not
// leaked), and the leader's metrics count the move; no matching node leaves status.host empty and
// the endpoints leave with the egress IP of the EgressIP that also selects them, or without it
// their node IP; while the service has a host, they leave with the LB IP (EgressService before
// EgressIP).
func TestPrivilegedEgressServiceMoves(t *testing.T) {
	privileged.Require(t)
	e := newEIPLab(t, 3) // nodes 1 and 2 egress-assignable
	l := e.Lab
	ctx := context.Background()
	n0, n1, n2 := l.Nodes[0], l.Nodes[1], l.Nodes[2]
	ns := e.ns
	lb4 := netip.MustParseAddr(lbIP4)

	// ETP=Local: the only endpoint is on node 1, so is the host (node 0 would come first by name).
	local1 := addPod(t, n1, ns, "local1", lab.PodOptions{Labels: map[string]string{"app": "local"}})
	loadBalancer(t, l, ns, "local", "  externalTrafficPolicy: Local\n", lbIP4)
	apply(t, l, ns, "apiVersion: k8s.ovn.org/v1\nkind: EgressService\nmetadata:\n  name: local\nspec:\n  sourceIPBy: LoadBalancerIP\n")
	waitHost(t, l, ns, "local", n1.Name)
	routeLB(t, e.web, n1, lb4)
	eventuallySource(t, "ETP=Local, endpoint on the host", local1, webAddr(web4), lb4)
	// The endpoint moves to node 2: so does the host.
	if err := local1.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	local2 := addPod(t, n2, ns, "local2", lab.PodOptions{Labels: map[string]string{"app": "local"}})
	waitHost(t, l, ns, "local", n2.Name)
	waitLabel(t, l, "egress-service.k8s.ovn.org/"+ns+"-local", n2.Name)
	routeLB(t, e.web, n2, lb4)
	eventuallySource(t, "ETP=Local, endpoint moved with the host", local2, webAddr(web4), lb4)
	if err := l.Kube.Delete(ctx, "k8s.ovn.org/v1", "EgressService", ns, "local"); err != nil {
		t.Fatal(err)
	}

	// nodeSelector: node 0 first.
	label := "egress-service.k8s.ovn.org/" + ns + "-lb"
	setLabel := func(n *lab.Node, v *string) {
		t.Helper()
		patch := `{"metadata":{"labels":{"egress-host":null}}}`
		if v != nil {
			patch = `{"metadata":{"labels":{"egress-host":"` + *v + `"}}}`
		}
		if _, err := l.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	yes := "yes"
	setLabel(n0, &yes)
	ep1 := addPod(t, n1, ns, "ep1", lab.PodOptions{Labels: map[string]string{"app": "lb"}})
	ep2 := addPod(t, n2, ns, "ep2", lab.PodOptions{Labels: map[string]string{"app": "lb"}})
	loadBalancerEgressService(t, l, ns, "", lbIP4)
	waitHost(t, l, ns, "lb", n0.Name)
	waitLabel(t, l, label, n0.Name)
	routeLB(t, e.web, n0, lb4)
	eventuallySource(t, "endpoint on another node", ep2, webAddr(web4), lb4)
	// The window before the host's SNAT of an endpoint exists (its element taken out by hand):
	// the endpoint's steered packets are dropped on the host rather than leave with the pod
	// address or, masqueraded, with the host's.
	n0.NS.MustRun(t, "nft", "delete", "element", "inet", "egressd", "egressip_snat4", "{", ep2.IPv4.String(), "}")
	for _, r := range []lab.Result{ep2.TCP(webAddr(web4), lab.ClientOptions{Timeout: quick}), ep2.UDP(webAddr(web4), lab.ClientOptions{Timeout: quick})} {
		if r.Outcome != lab.Timeout {
			t.Errorf("%s without its SNAT on the host: %s, want dropped", ep2.Name, r)
		}
	}
	if out := n0.NS.MustRun(t, "nft", "list", "counter", "inet", "egressd", "egressip_leaks"); strings.Contains(out, "packets 0 ") {
		t.Errorf("the host's leak guard counted nothing:\n%s", out)
	}
	n0.NS.MustRun(t, "nft", "add", "element", "inet", "egressd", "egressip_snat4", "{", ep2.IPv4.String(), ":", lbIP4, "}")
	eventuallySource(t, "SNAT back", ep2, webAddr(web4), lb4)

	// An EgressIP (on node 1) selects the endpoints too: the EgressService wins.
	eip := netip.MustParseAddr(eip4)
	name := e.egressIP(t, "svc", "lb", eip)
	e.waitPlaced(t, name, 20*time.Second, map[*lab.Node]netip.Addr{n1: eip})
	eventuallySource(t, "EgressService before EgressIP", ep1, webAddr(web4), lb4)
	eventuallySource(t, "EgressService before EgressIP, endpoint on another node", ep2, webAddr(web4), lb4)

	capture := e.web.Capture()
	defer capture.Stop()
	var streams []*lab.Stream
	ports := map[uint16]*lab.Pod{}
	for i, p := range []*lab.Pod{ep1, ep2} {
		s, err := p.StreamUDP(lab.HostPort(web4, lab.ServerPorts[i]), 5*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Stop()
		streams = append(streams, s)
		ports[lab.ServerPorts[i]] = p
	}
	fromPod := func(c lab.Captured) bool {
		return c.ForHost && (c.Src == ep1.IPv4 || c.Src == ep2.IPv4)
	}
	otherSource := func(c lab.Captured) bool {
		return c.ForHost && c.Proto == "udp" && ports[c.DstPort] != nil && c.Src != lb4
	}
	// The leader's metrics, before and after the move: the control plane is shared with other
	// labs whose EgressServices (being deleted with their namespace) name the same nodes.
	leader := leaderNode(t, l)
	movesOff0 := `egressd_egressservice_moves_total{node="` + n0.Name + `"}`
	hostedOn1 := `egressd_egressservice_hosted{node="` + n1.Name + `"}`
	before := map[string]float64{movesOff0: sampleOf(t, leader.Controller, movesOff0), hostedOn1: sampleOf(t, leader.Controller, hostedOn1)}
	labels := watchLabel(t, l, label)
	setLabel(n1, &yes)
	setLabel(n0, nil)
	waitHost(t, l, ns, "lb", n1.Name)
	waitLabel(t, l, label, n1.Name)
	routeLB(t, e.web, n1, lb4)
	mac1 := mustMAC(t, n1)
	for port, p := range ports {
		if _, ok := capture.Await(time.Now(), 10*time.Second, func(c lab.Captured) bool {
			return c.ForHost && c.DstPort == port && c.Src == lb4 && c.MAC == mac1
		}); !ok {
			t.Errorf("%s's stream does not arrive with %s from the new host %s", p.Name, lb4, n1.Name)
		}
	}
	labels.check(t, "nodeSelector move")
	poll.Eventually(t, "the leader's metrics of the move", 10*time.Second, func() error {
		for series, was := range before {
			if v := sampleOf(t, leader.Controller, series); v != was+1 {
				return fmt.Errorf("%s = %v, want %v", series, v, was+1)
			}
		}
		return nil
	})
	if n := capture.Count(fromPod); n > 0 {
		t.Errorf("%d packets left with a pod address during the move", n)
	}
	if n := capture.Count(otherSource); n > 0 {
		t.Errorf("%d packets of the streams arrived with another source than %s during the move", n, lb4)
	}
	for _, s := range streams {
		s.Stop()
	}

	// No node matches: no host, no label; the endpoints leave as they would without the service:
	// with the egress IP, and without the EgressIP, their node's IP.
	setLabel(n1, nil)
	waitHost(t, l, ns, "lb", "")
	waitLabel(t, l, label, "")
	labels.check(t, "no matching node")
	waitServiceEvent(t, l, ns, "lb", "NoMatchingNodeFound")
	eventuallySource(t, "no host, EgressIP", ep1, webAddr(web4), eip)
	eventuallySource(t, "no host, EgressIP", ep2, webAddr(web4), eip)
	if err := l.Kube.Delete(ctx, "k8s.ovn.org/v1", "EgressIP", "", name); err != nil {
		t.Fatal(err)
	}
	eventuallySource(t, "no host, no EgressIP", ep1, webAddr(web4), n1.IPv4)
	eventuallySource(t, "no host, no EgressIP", ep2, webAddr(web4), n2.IPv4)
}
