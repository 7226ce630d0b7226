package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/egressd/egressd/dataplane/bfd"
	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/frr"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

func TestMain(m *testing.M) { controlplane.Main(m) }

func mustPod(t *testing.T, n *lab.Node, ns, name string) *lab.Pod {
	t.Helper()
	p, err := n.AddPod(context.Background(), ns, name, lab.PodOptions{Labels: map[string]string{"app": name}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func macOf(t *testing.T, n *lab.Node, link string) string {
	t.Helper()
	var mac string
	err := n.NS.Do(func() error {
		ifi, err := net.InterfaceByName(link)
		if err == nil {
			mac = ifi.HardwareAddr.String()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return mac
}

// What a CNI gives pods, on both CNI shapes, on flannel and on Cilium: egress to external hosts
// masqueraded to the node IP, pod-to-pod with pod IPs preserved, IPv6 alike, and servers
// reporting DSCP and MAC.
func TestPrivilegedLabConnectivity(t *testing.T) {
	privileged.Require(t)
	overlays := map[lab.CNI]string{lab.Flannel: "flannel.1", lab.Cilium: "cilium_vxlan"}
	for name, shapes := range map[string]map[int]lab.CNI{"routed+bridged": {1: lab.Bridged},
		"flannel": {0: lab.Flannel, 1: lab.Flannel}, "cilium": {0: lab.Cilium, 1: lab.Cilium}} {
		t.Run(name, func(t *testing.T) {
			l := lab.New(t, lab.Options{Nodes: 2, CNI: shapes})
			checkConnectivity(t, l)
			tunnel, ok := overlays[shapes[0]]
			if !ok {
				return
			}
			// Pod to pod crossed the CNI's overlay, not a route of the lab's.
			for _, n := range l.Nodes {
				out, err := n.NS.Run("ip", "-s", "-j", "link", "show", tunnel)
				if err != nil {
					t.Fatal(err)
				}
				var links []struct {
					Stats struct{ TX struct{ Packets int } } `json:"stats64"`
				}
				if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 || links[0].Stats.TX.Packets == 0 {
					t.Errorf("%s: %s sent nothing: %s (%v)", n.Name, tunnel, out, err)
				}
			}
		})
	}
}

func checkConnectivity(t *testing.T, l *lab.Lab) {
	ns := l.CP.Namespace(t)
	ext, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10")
	if err != nil {
		t.Fatal(err)
	}
	pods := []*lab.Pod{mustPod(t, l.Nodes[0], ns, "p0"), mustPod(t, l.Nodes[1], ns, "p1")}
	if err := pods[1].Serve(8080); err != nil {
		t.Fatal(err)
	}
	if err := pods[0].Serve(8080); err != nil {
		t.Fatal(err)
	}
	for i, p := range pods {
		other := pods[1-i]
		node := p.Node
		t.Run(node.Name, func(t *testing.T) {
			for _, c := range []struct {
				name  string
				res   lab.Result
				wantS string
			}{
				{"tcp v4 to external", p.TCP("203.0.113.10:443"), node.IPv4.String()},
				{"udp v4 to external", p.UDP("203.0.113.10:80"), node.IPv4.String()},
				{"tcp v6 to external", p.TCP("[2001:db8::10]:8080"), node.IPv6.String()},
				{"udp v6 to external", p.UDP("[2001:db8::10]:443"), node.IPv6.String()},
				{"tcp v4 to pod on other node", p.TCP(lab.HostPort(other.IPv4, 8080)), p.IPv4.String()},
				{"udp v6 to pod on other node", p.UDP(lab.HostPort(other.IPv6, 8080)), p.IPv6.String()},
			} {
				if c.res.Outcome != lab.OK || c.res.Seen.Src.String() != c.wantS {
					t.Errorf("%s: %s, want ok from %s", c.name, c.res, c.wantS)
				}
			}
			r := p.UDP("203.0.113.10:8080", lab.ClientOptions{TOS: 46<<2 | 1})
			if r.Outcome != lab.OK || r.Seen.DSCP != 46 || r.Seen.ECN != 1 {
				t.Errorf("TOS 0xb9: %s dscp %d ecn %d, want dscp 46 ecn 1", r, r.Seen.DSCP, r.Seen.ECN)
			}
			r = p.TCP("[2001:db8::10]:80", lab.ClientOptions{TOS: 10 << 2})
			if r.Outcome != lab.OK || r.Seen.DSCP != 10 {
				t.Errorf("IPv6 traffic class DSCP 10: %s", r)
			}
			if r := p.TCP("203.0.113.10:443"); r.Seen.MAC != macOf(t, node, "eth0") || r.Seen.Host != ext.Name {
				t.Errorf("seen MAC %s host %s, want node eth0 %s and %s", r.Seen.MAC, r.Seen.Host, macOf(t, node, "eth0"), ext.Name)
			}
			if r := p.TCP("203.0.113.10:81"); r.Outcome != lab.Refused {
				t.Errorf("closed port: %s, want refused", r)
			}
			if err := p.Ping("203.0.113.10"); err != nil {
				t.Errorf("ping: %v", err)
			}
		})
	}
}

// Agents run in every node's namespace, ready, metrics reachable; of two controller replicas,
// one holds the Lease and says so in its metrics, the other does not.
func TestPrivilegedLabAgents(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, Agents: true, ControllerNodes: []int{0, 1}})
	ctx := context.Background()
	var holder *lab.Node
	poll.Eventually(t, "a controller replica holds the Lease", 20*time.Second, func() error {
		if holder = l.LeaderNode(ctx); holder == nil {
			return fmt.Errorf("no holder")
		}
		return nil
	})
	poll.Eventually(t, "one leader, the Lease holder", 10*time.Second, func() error {
		var leaders []string
		for _, n := range l.Nodes {
			v, err := n.Controller.Metric("egressd_leader")
			if err != nil {
				return fmt.Errorf("%s metrics: %v", n.Name, err)
			}
			if v == "1" {
				leaders = append(leaders, n.Name)
			}
		}
		if len(leaders) != 1 || leaders[0] != holder.Name {
			return fmt.Errorf("leaders %v, Lease holder %q", leaders, holder.Name)
		}
		return nil
	})
	if !strings.Contains(l.Nodes[0].Agent.Log(), "first sync finished") {
		t.Errorf("no first sync in log")
	}
}

// Close leaves no namespace, pin, process or file behind.
func TestPrivilegedLabTeardownLeavesNothing(t *testing.T) {
	privileged.Require(t)
	cp := controlplane.Shared(t)
	l, err := lab.Start(context.Background(), cp, lab.Options{Nodes: 2, Agents: true, NodePrefix: "td-"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AddExternal("x", lab.ExternalOptions{}, "192.0.2.10"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Nodes[0].AddPod(context.Background(), cp.Namespace(t), "p", lab.PodOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(lab.PinRoot(l.ID, l.Nodes[0].Name), 0o755); err != nil { // as the agent will
		t.Fatal(err)
	}
	agents := []int{}
	for _, n := range l.Nodes {
		agents = append(agents, n.Agent.Pid())
	}
	// What the lab made, found the way the checks below look for leftovers: so that they
	// cannot pass by looking in the wrong place.
	left := func() (namespaces, pins, nodes []string) {
		t.Helper()
		names, err := os.ReadDir("/run/netns")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if strings.HasPrefix(n.Name(), "el"+l.ID) {
				namespaces = append(namespaces, n.Name())
			}
		}
		pins, _ = filepath.Glob("/sys/fs/bpf/egressd-lab-" + l.ID + "-*")
		list, err := l.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range list.Items {
			if strings.HasPrefix(n.Name, "td-") {
				nodes = append(nodes, n.Name)
			}
		}
		return
	}
	if namespaces, pins, nodes := left(); len(namespaces) < 4 || len(pins) == 0 || len(nodes) != 2 { // fabric, 2 nodes, a pod, a host
		l.Close()
		t.Fatalf("before Close: namespaces %v, pins %v, Nodes %v", namespaces, pins, nodes)
	}
	if _, err := os.Stat(l.Dir); err != nil {
		l.Close()
		t.Fatalf("before Close: %v", err)
	}
	l.Close()
	namespaces, pins, nodes := left()
	if len(namespaces) > 0 {
		t.Errorf("namespaces left behind: %v", namespaces)
	}
	if len(pins) > 0 {
		t.Errorf("pins left: %v", pins)
	}
	if len(nodes) > 0 {
		t.Errorf("Nodes left behind: %v", nodes)
	}
	if _, err := os.Stat(l.Dir); err == nil {
		t.Errorf("%s left behind", l.Dir)
	}
	for _, pid := range agents {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("agent pid %d still running", pid)
		}
	}
}

// Two labs side by side on one machine do not collide.
func TestPrivilegedLabSideBySide(t *testing.T) {
	privileged.Require(t)
	var wg sync.WaitGroup
	labs := make([]*lab.Lab, 2)
	for i := range labs {
		wg.Go(func() {
			labs[i] = lab.New(t, lab.Options{Nodes: 2, NodePrefix: []string{"a-", "b-"}[i]})
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, l := range labs {
		if _, err := l.AddExternal("srv", lab.ExternalOptions{}, "198.51.100.7"); err != nil {
			t.Fatal(err)
		}
		p := mustPod(t, l.Nodes[1], l.CP.Namespace(t), "p")
		if r := p.TCP("198.51.100.7:80"); r.Outcome != lab.OK || r.Seen.Src != l.Nodes[1].IPv4 {
			t.Errorf("lab %d: %s", i, r)
		}
	}
	if labs[0].ID == labs[1].ID {
		t.Fatal("same lab id")
	}
}

// The lab's DNS server answers with the records and TTLs the test sets, case-insensitively,
// and counts queries.
func TestPrivilegedLabDNS(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 1})
	d, err := l.AddDNS("dns", "198.51.100.53")
	if err != nil {
		t.Fatal(err)
	}
	d.Set("www.example.com", 7, "203.0.113.20", "2001:db8::20")
	p := mustPod(t, l.Nodes[0], l.CP.Namespace(t), "p")
	ips, ttl, err := p.Lookup(d.Addr, "WWW.Example.com", dns.TypeA)
	if err != nil || len(ips) != 1 || ips[0].String() != "203.0.113.20" || ttl != 7 {
		t.Fatalf("A: %v ttl %d err %v", ips, ttl, err)
	}
	ips, _, err = p.Lookup(d.Addr, "www.example.com", dns.TypeAAAA)
	if err != nil || len(ips) != 1 || ips[0].String() != "2001:db8::20" {
		t.Fatalf("AAAA: %v err %v", ips, err)
	}
	d.Set("www.example.com", 0, "203.0.113.21")
	if ips, ttl, _ := p.Lookup(d.Addr, "www.example.com", dns.TypeA); len(ips) != 1 || ips[0].String() != "203.0.113.21" || ttl != 0 {
		t.Fatalf("changed answer: %v ttl %d", ips, ttl)
	}
	if _, _, err := p.Lookup(d.Addr, "nope.example.com", dns.TypeA); err == nil || !strings.Contains(err.Error(), "NXDOMAIN") {
		t.Fatalf("unknown name: %v", err)
	}
	if n := d.Queries("www.example.com"); n != 3 {
		t.Errorf("queries = %d, want 3", n)
	}
}

// kube-controller-manager keeps EndpointSlices of test-created Services from the lab's pods,
// following readiness as kubelet would report it.
func TestPrivilegedLabEndpointSlices(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 1})
	ctx := context.Background()
	ns := l.CP.Namespace(t)
	p := mustPod(t, l.Nodes[0], ns, "web")
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := l.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "a ready endpoint "+p.IPv4.String()+" for Service "+ns+"/web", 20*time.Second, func() error {
		slices, err := l.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
		if err != nil {
			return err
		}
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if len(e.Addresses) > 0 && e.Addresses[0] == p.IPv4.String() && e.Conditions.Ready != nil && *e.Conditions.Ready {
					return nil
				}
			}
		}
		return fmt.Errorf("endpoint slices %+v", slices.Items)
	})
}

// A gateway host forwards, and runs FRR bfdd (zebra first) as the BFD peer of a node across
// the fabric: the session comes Up.
func TestPrivilegedLabGatewayRunsBFDD(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 1})
	gw, err := l.AddExternal("gw", lab.ExternalOptions{Forwarding: true}, "198.51.100.1")
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := gw.NS.Run("sysctl", "-n", "net.ipv4.ip_forward"); strings.TrimSpace(out) != "1" {
		t.Errorf("gateway does not forward: ip_forward=%q", out)
	}
	n := l.Nodes[0]
	f := frr.StartBFDD(t, gw.NS, fmt.Sprintf("bfd\n peer %s local-address %s interface eth0\n !\n!\n", n.IPv4, gw.Fabric))
	var m *bfd.Manager
	if err := n.NS.Do(func() (err error) { m, err = bfd.New(slog.New(slog.NewTextHandler(io.Discard, nil))); return }); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if errs := m.Sync([]bfd.Config{{Peer: gw.Fabric, Local: n.IPv4, Interface: "eth0"}}); len(errs) > 0 {
		t.Fatal(errs)
	}
	poll.Eventually(t, "BFD node <-> gateway Up", 10*time.Second, func() error {
		if frr, node := f.PeerStatus(n.IPv4.String()), m.Sessions()[0].State; frr != "up" || node != bfd.Up {
			return fmt.Errorf("FRR %q, node %s", frr, node)
		}
		return nil
	})
}
