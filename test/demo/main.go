// Command demo runs egressd on its lab and shows, step by step, what was expected and what was
// observed (make demo). With --keep it stays up until interrupted or `make demo-down`, and
// prints how to look at it with kubectl, nft, bpftool and curl.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/egressd/egressd/dataplane/tc"
	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/lab"
)

// PidFile lets make demo-down stop a kept demo.
const PidFile = "/tmp/egressd-demo.pid"

func main() {
	var o options
	flag.BoolVar(&o.keep, "keep", false, "leave the demo running until interrupted")
	flag.StringVar(&o.cni, "cni", "routed+bridged", "the lab's CNI: routed+bridged (node-0 routed pods, node-1 bridged: the reference plugins), flannel (flanneld, VXLAN), cilium (cilium-agent, VXLAN tunnel, legacy host routing), cilium-native (native routing), cilium-kpr (kube-proxy replacement: with --kube-proxy none) or cilium-bpfmasq (that and BPF masquerading)")
	flag.StringVar(&o.kubeProxy, "kube-proxy", "stand-in", "what programs Services: stand-in (the lab's), the real kube-proxy in iptables or nftables mode, or none (Cilium's replacement)")
	flag.StringVar(&o.report, "report", "", "write the checks per API as JSON to this file (make test-compat)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	failures, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	if failures > 0 {
		fmt.Printf("\n%d observation(s) differed from what was expected\n", failures)
		os.Exit(1)
	}
}

func repo() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// demoDNS is the lab's DNS server, the agents' --dns-server.
const demoDNS = "198.51.100.53"

type options struct {
	keep                   bool
	cni, kubeProxy, report string
}

func run(ctx context.Context, o options) (int, error) {
	c := &checker{report: Report{CNI: o.cni, KubeProxy: o.kubeProxy}}
	if o.report != "" {
		defer func() {
			if err := c.write(o.report); err != nil {
				fmt.Fprintln(os.Stderr, "demo:", err)
			}
		}()
	}
	labOpts := lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true, Log: os.Stdout,
		AgentArgs: []string{"--dns-server", demoDNS + ":53"}}
	shape := "node-0 (routed pods), node-1 (bridged pods)"
	switch o.cni {
	case "routed+bridged":
	case "flannel":
		labOpts.CNI = map[int]lab.CNI{0: lab.Flannel, 1: lab.Flannel}
		shape = "flannel on node-0 and node-1 (VXLAN, its masquerade)"
	case "cilium":
		labOpts.CNI = map[int]lab.CNI{0: lab.Cilium, 1: lab.Cilium}
		shape = "Cilium on node-0 and node-1 (VXLAN tunnel, legacy host routing, iptables masquerade)"
	case "cilium-native":
		labOpts.CNI = map[int]lab.CNI{0: lab.Cilium, 1: lab.Cilium}
		labOpts.CiliumArgs = lab.CiliumNativeRouting()
		shape = "Cilium on node-0 and node-1 (native routing, legacy host routing, iptables masquerade)"
	case "cilium-kpr":
		labOpts.CNI = map[int]lab.CNI{0: lab.Cilium, 1: lab.Cilium}
		labOpts.CiliumArgs = lab.CiliumKubeProxyReplacement()
		shape = "Cilium on node-0 and node-1 (VXLAN tunnel, kube-proxy replacement, legacy host routing, iptables masquerade)"
	case "cilium-bpfmasq":
		labOpts.CNI = map[int]lab.CNI{0: lab.Cilium, 1: lab.Cilium}
		labOpts.CiliumArgs = lab.CiliumBPFMasquerade()
		shape = "Cilium on node-0 and node-1 (VXLAN tunnel, kube-proxy replacement, BPF masquerade, legacy host routing)"
	default:
		return 0, fmt.Errorf("--cni %q: routed+bridged, flannel, cilium, cilium-native, cilium-kpr or cilium-bpfmasq", o.cni)
	}
	switch o.kubeProxy {
	case "stand-in":
	case "iptables", "nftables", lab.KubeProxyNone:
		labOpts.KubeProxy = o.kubeProxy
	default:
		return 0, fmt.Errorf("--kube-proxy %q: stand-in, iptables, nftables or none (with --cni cilium-kpr)", o.kubeProxy)
	}
	if replaced := o.cni == "cilium-kpr" || o.cni == "cilium-bpfmasq"; (o.kubeProxy == lab.KubeProxyNone) != replaced {
		return 0, fmt.Errorf("--kube-proxy none goes with --cni cilium-kpr and cilium-bpfmasq, whose Cilium replaces kube-proxy, and only with them")
	}
	c.step("", "starting the control plane (etcd, kube-apiserver, kube-controller-manager; the first run builds them: ~5-10 min)")
	cp, err := controlplane.Start(ctx, controlplane.Options{Log: os.Stdout})
	if err != nil {
		return 0, err
	}
	defer cp.Stop()
	fmt.Printf("    ready at %s\n", cp.Server)

	c.step("", "building the lab: %s, egressd on each, an external host; Services by kube-proxy %s", shape, o.kubeProxy)
	l, err := lab.Start(ctx, cp, labOpts)
	if err != nil {
		return 0, err
	}
	defer l.Close()
	defer func() {
		if c.failures > 0 {
			printTrouble(l)
		}
	}()
	web, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10")
	if err != nil {
		return 0, err
	}
	docs, err := l.AddExternal("docs", lab.ExternalOptions{}, "192.0.2.10")
	if err != nil {
		return 0, err
	}
	dnsServer, err := l.AddDNS("dns", demoDNS)
	if err != nil {
		return 0, err
	}
	if _, err := l.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	var pods []*lab.Pod
	for i, n := range l.Nodes {
		p, err := n.AddPod(ctx, "demo", fmt.Sprintf("client-%d", i), lab.PodOptions{Labels: map[string]string{"app": "client"}})
		if err != nil {
			return 0, err
		}
		pods = append(pods, p)
	}
	voice, err := l.Nodes[0].AddPod(ctx, "demo", "voice", lab.PodOptions{Labels: map[string]string{"app": "voice"}})
	if err != nil {
		return 0, err
	}

	c.step("lab", "the agents, and egressd controller")
	var holder *lab.Node
	for deadline := time.Now().Add(10 * time.Second); holder == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		holder = l.LeaderNode(ctx)
	}
	observed := "no holder"
	if holder != nil {
		observed = "controller@" + holder.Name
	}
	c.check("egressd controller holds the leader Lease", "controller@"+l.Nodes[0].Name, observed)
	if holder != nil {
		v, _ := holder.Controller.Metric("egressd_leader")
		c.check("controller@"+holder.Name+" egressd_leader", "1", v)
	}
	for _, n := range l.Nodes {
		code, _, _ := n.Agent.Get("/readyz")
		c.check(n.Name+" /readyz", "200", fmt.Sprint(code))
	}

	c.step("lab", "the classifier on every pod-facing interface (its tc program at ingress, before any of the CNI's)")
	for _, p := range pods {
		deadline := time.Now().Add(10 * time.Second)
		var names []string
		for time.Now().Before(deadline) {
			progs, _ := p.Node.IngressPrograms(p.PodFacing())
			names = names[:0]
			for _, pr := range progs {
				names = append(names, pr.Name)
			}
			if len(names) > 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		// First: a CNI's own program after it (Cilium's) sees what egressd let pass.
		first := "none"
		if len(names) > 0 {
			first = names[0]
		}
		c.check(fmt.Sprintf("%s %s (%s CNI: %s)", p.Node.Name, p.PodFacing(), p.Node.CNI, strings.Join(names, ", ")), tc.ProgramName+" first", first+" first")
	}

	c.step("lab", "traffic from the pods, as the external server %s saw it", web.Name)
	for _, p := range pods {
		r := p.TCP("203.0.113.10:443")
		c.check(fmt.Sprintf("%s -> 203.0.113.10:443 source", p.Name), "ok "+p.Node.IPv4.String()+" (masqueraded)", fmt.Sprintf("%s %s (masqueraded)", r.Outcome, r.Seen.Src))
		r = p.UDP("[2001:db8::10]:80", lab.ClientOptions{TOS: 46 << 2})
		c.check(fmt.Sprintf("%s -> [2001:db8::10]:80 udp, DSCP 46 set by the pod", p.Name), "ok dscp 46", fmt.Sprintf("%s dscp %d", r.Outcome, r.Seen.DSCP))
	}

	c.step("lab", "applying deploy/examples (one per API)")
	files, _ := filepath.Glob(filepath.Join(repo(), "deploy", "examples", "*.yaml"))
	for _, f := range files {
		doc, _ := os.ReadFile(f)
		observed := "accepted"
		if err := l.Kube.Apply(ctx, "demo", string(doc)); err != nil {
			observed = "rejected: " + err.Error()
		}
		c.check(filepath.Base(f), "accepted", observed)
	}

	c.step("EgressFirewall", "EgressFirewall demo/default (deploy/examples/egressfirewall.yaml) as the pods live it")
	fwStatus := "unset"
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressFirewall", "demo", "default", "status.status", "EgressFirewall Rules applied", 20*time.Second); err == nil {
		fwStatus = "EgressFirewall Rules applied"
	}
	c.check("status.status", "EgressFirewall Rules applied", fwStatus)
	type fwCheck struct {
		p    *lab.Pod
		dst  string
		want lab.Outcome
		why  string
	}
	checks := []fwCheck{
		{pods[0], "192.0.2.10:443", lab.OK, "rule 0: 192.0.2.0/24 TCP 443"},
		{pods[1], "192.0.2.10:80", lab.OK, "rule 0: 192.0.2.0/24 TCP 80"},
		{pods[0], "192.0.2.10:8080", lab.Timeout, "rule 3: deny 0.0.0.0/0"},
		{pods[1], "203.0.113.10:443", lab.Timeout, "rule 3: deny 0.0.0.0/0"},
		{pods[0], "[2001:db8::10]:443", lab.Timeout, "rule 4: deny ::/0"},
	}
	// Services whose one backend is outside the cluster: judged by the backend, whoever
	// translated the ClusterIP (kube-proxy after egressd's classifier, or Cilium's program).
	if err := l.StartKubeProxy(ctx); err != nil {
		return c.failures, err
	}
	for _, b := range []struct {
		p    *lab.Pod
		port int32
		want lab.Outcome
		why  string
	}{{pods[1], 80, lab.OK, "rule 0: 192.0.2.0/24 TCP 80"}, {pods[0], 8080, lab.Timeout, "rule 3: deny 0.0.0.0/0"}} {
		ip, err := outsideService(ctx, l, "demo", fmt.Sprintf("backend-%d", b.port), "192.0.2.10", b.port)
		if err != nil {
			return c.failures, err
		}
		checks = append(checks, fwCheck{b.p, net.JoinHostPort(ip, strconv.Itoa(int(b.port))), b.want, "Service to 192.0.2.10:" + strconv.Itoa(int(b.port)) + ", " + b.why})
	}
	for _, x := range checks {
		var r lab.Result
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if r = x.p.TCP(x.dst, lab.ClientOptions{Timeout: time.Second}); r.Outcome == x.want || time.Now().After(deadline) {
				break
			}
		}
		c.check(fmt.Sprintf("%s -> %s (%s)", x.p.Name, x.dst, x.why), string(x.want), string(r.Outcome))
	}

	// egressd-cni programs a new pod before its CNI ADD returns: its very first packet is judged.
	for _, n := range l.Nodes {
		p, err := n.AddPod(ctx, "demo", "new-"+n.Name, lab.PodOptions{})
		if err != nil {
			return c.failures, err
		}
		first := p.TCP("203.0.113.10:443", lab.ClientOptions{Timeout: time.Second})
		c.check(fmt.Sprintf("%s: a new pod's first connection -> 203.0.113.10:443 (denied)", n.Name), string(lab.Timeout), string(first.Outcome))
		first = p.TCP("192.0.2.10:443", lab.ClientOptions{Timeout: time.Second})
		c.check(fmt.Sprintf("%s: the new pod's first -> 192.0.2.10:443 (allowed)", n.Name), string(lab.OK), string(first.Outcome))
	}

	c.step("EgressFirewall dnsName", "EgressFirewall demo-dns/default: dnsName allows what the pod was answered, wildcards too (its DNS server rotates 8 addresses)")
	if err := demoDNSAnswers(ctx, l, c, dnsServer); err != nil {
		return c.failures, err
	}

	c.step("EgressQoS", "EgressQoS demo/default (deploy/examples/egressqos.yaml): the DSCP the server saw")
	for _, x := range []struct {
		p    *lab.Pod
		want int
	}{{voice, 46}, {pods[0], 10}, {pods[1], 10}} {
		seen := -1
		for deadline := time.Now().Add(5 * time.Second); seen != x.want && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if r := x.p.TCP("192.0.2.10:443", lab.ClientOptions{Timeout: time.Second}); r.Outcome == lab.OK {
				seen = int(r.Seen.DSCP)
			}
		}
		c.check(fmt.Sprintf("%s (%s) -> 192.0.2.10:443", x.p.Name, x.p.Node.CNI), fmt.Sprint(x.want), fmt.Sprint(seen))
	}
	c.step("EgressIP", "EgressIP demo-clients: %s labelled %s, the pods of namespace demo leave with 172.18.0.200, directly and through a Service", l.Nodes[1].Name, "k8s.ovn.org/egress-assignable")
	if err := demoEgressIP(ctx, l, c, pods); err != nil {
		return c.failures, err
	}
	c.step("EgressIP secondary network", "EgressIP demo-voice on a secondary network: %s gets a second NIC towards the external host docs, and 10.10.10.100 leaves through it", l.Nodes[1].Name)
	if err := demoSecondaryEgressIP(ctx, l, c, docs, voice); err != nil {
		return c.failures, err
	}
	c.step("EgressRouter", "EgressRouter: the example placed though its network is no lab node's (the default-route interface, as upstream), and a router on the fabric reached through a Service")
	if err := demoEgressRouter(ctx, l, c, web); err != nil {
		return c.failures, err
	}
	c.step("AdminPolicyBasedExternalRoute", "AdminPolicyBasedExternalRoute demo-routes: the pods of namespace demo-routes leave through a gateway host, with their pod IPs")
	if err := demoExternalRoute(ctx, l, c, docs); err != nil {
		return c.failures, err
	}
	c.step("EgressService", "EgressService demo-lb/lb: the endpoints of a LoadBalancer Service leave with its ingress IP, from the elected node")
	if err := demoEgressService(ctx, l, c, web); err != nil {
		return c.failures, err
	}
	c.step("CloudPrivateIPConfig", "CloudPrivateIPConfig: the nodes get the cloud's egress-ipconfig; egressd asks the cloud for 172.18.0.200 (the demo plays the CNCC)")
	if err := demoCloud(ctx, l, c, pods); err != nil {
		return c.failures, err
	}

	if !o.keep {
		c.step("", "tearing down")
		return c.failures, nil
	}
	_ = os.WriteFile(PidFile, []byte(fmt.Sprint(os.Getpid())), 0o644)
	defer os.Remove(PidFile)
	n0 := l.Nodes[0]
	fmt.Printf(`
The demo keeps running; Ctrl-C here, or make demo-down from another shell, stops it.
  export KUBECONFIG=%s
  kubectl get nodes,pods -A; kubectl get egressfirewall,egressqos,eip,apbexternalroute,egressservice,egressrouter -A
  nsenter --net=%s curl -s http://%s/metrics | grep ^egressd_          # node-0's agent
  nsenter --net=%s nft list ruleset
  nsenter --net=%s bpftool prog show name %s
  nsenter --net=%s egressctl trace --bpf-pin-root %s %s 203.0.113.10 tcp/443   (make build: bin/egressctl)
  nsenter --net=%s egressctl firewall --bpf-pin-root %s
  nsenter --net=%s tc filter show dev %s ingress                    # egressd's filter: pref 49152
  agent logs: %s/node-0.log %s/node-1.log
`, cp.Kubeconfig, n0.NS.Path(), n0.Agent.MetricsAddr, n0.NS.Path(), n0.NS.Path(), tc.ProgramName,
		n0.NS.Path(), lab.PinRoot(l.ID, n0.Name), pods[0].IPv4, n0.NS.Path(), lab.PinRoot(l.ID, n0.Name),
		pods[0].Node.NS.Path(), pods[0].PodFacing(), l.Dir, l.Dir)
	<-ctx.Done()
	c.step("", "tearing down")
	return c.failures, nil
}

// demoEgressIP makes node-1 an egress node and shows the source the external host sees from
// the client pods of both nodes: the egress IP, whether the pod runs on the egress node or is
// steered there from node-0 with its pod IP intact.
func demoEgressIP(ctx context.Context, l *lab.Lab, c *checker, pods []*lab.Pod) error {
	patch := []byte(`{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":""}}}`)
	if _, err := l.Client.CoreV1().Nodes().Patch(ctx, l.Nodes[1].Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	const eip = "172.18.0.200"
	if err := demoNamespaceEgressIP(ctx, l, "demo-clients", "client", eip); err != nil {
		return err
	}
	items := awaitItems(ctx, l, "demo-clients")
	c.check("status.items", l.Nodes[1].Name+"="+eip, items)
	for _, p := range pods {
		var r lab.Result
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if r = p.TCP("192.0.2.10:443", lab.ClientOptions{Timeout: time.Second}); r.Seen.Src.String() == eip || time.Now().After(deadline) {
				break
			}
		}
		c.check(fmt.Sprintf("%s (%s) -> 192.0.2.10:443 source", p.Name, p.Node.Name), "ok "+eip, fmt.Sprintf("%s %s", r.Outcome, r.Seen.Src))
	}
	// The same server behind a Service without selector (an external database's, say):
	// kube-proxy DNATs after egressd's classifier, and the pods still leave with the egress IP.
	clusterIP, err := outsideService(ctx, l, "demo", "web", "192.0.2.10", 443)
	if err != nil {
		return err
	}
	for _, p := range pods {
		var r lab.Result
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if r = p.TCP(clusterIP+":443", lab.ClientOptions{Timeout: time.Second}); r.Seen.Src.String() == eip || time.Now().After(deadline) {
				break
			}
		}
		c.check(fmt.Sprintf("%s (%s) -> Service demo/web %s:443 source", p.Name, p.Node.Name, clusterIP), "ok "+eip, fmt.Sprintf("%s %s", r.Outcome, r.Seen.Src))
	}
	return nil
}

// demoNamespaceEgressIP applies EgressIP name: ip for the pods labelled app=<app> of namespace
// demo.
func demoNamespaceEgressIP(ctx context.Context, l *lab.Lab, name, app, ip string) error {
	return l.Kube.Apply(ctx, "", fmt.Sprintf(`apiVersion: k8s.ovn.org/v1
kind: EgressIP
metadata:
  name: %s
spec:
  egressIPs: [%q]
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: demo}
  podSelector:
    matchLabels: {app: %s}
`, name, ip, app))
}

// outsideService creates a Service without selector in ns whose one endpoint is ip:port, and
// returns its cluster IP.
func outsideService(ctx context.Context, l *lab.Lab, ns, name, ip string, port int32) (string, error) {
	svc, err := l.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: port, Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	_, err = l.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	return svc.Spec.ClusterIP, err
}

// awaitItems waits up to 20 s for an EgressIP's status.items and returns them (egressIPItems).
func awaitItems(ctx context.Context, l *lab.Lab, name string) string {
	items := "none"
	for deadline := time.Now().Add(20 * time.Second); items == "none" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		items = egressIPItems(ctx, l, name)
	}
	return items
}

// egressIPItems is an EgressIP's status.items as "node=ip" (comma-separated), or "none".
func egressIPItems(ctx context.Context, l *lab.Lab, name string) string {
	obj, err := l.Kube.Get(ctx, "k8s.ovn.org/v1", "EgressIP", "", name)
	if err != nil {
		return "none"
	}
	list, _, _ := unstructured.NestedSlice(obj.Object, "status", "items")
	var out []string
	for _, it := range list {
		m, _ := it.(map[string]any)
		out = append(out, fmt.Sprintf("%v=%v", m["node"], m["egressIP"]))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}
