// Command scale is egressd's scale harness (make bench-scale, issue #35): a real control plane
// (test/controlplane) where kwok plays thousands of nodes and runs their pods (Running, with
// addresses from each node's podCIDR), the API objects, and real egressd agents and a
// controller in lab nodes (test/lab). It prints each target of the issue with its number.
//
//	go run ./test/scale                # full size: 5,000 nodes, 150,000 pods, 10,000 namespaces
//	go run ./test/scale -size small    # 50 nodes, 1,500 pods, 100 namespaces: a quick run
//
// Root (network namespaces, bpf, nftables). Progress goes to stderr, the results to stdout.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/egressd/egressd/api/generated/clientset/versioned"
	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/test/controlplane"
	"github.com/egressd/egressd/test/kube"
	"github.com/egressd/egressd/test/lab"
)

// size is the cluster a run builds.
type size struct {
	Nodes, Pods, Namespaces int
	// EgressQoS, EgressIPs (selecting EgressIPPods pods) and EgressServices objects.
	EgressQoS, EgressIPs, EgressIPPods, EgressServices int
	// NewFirewalls are created at once, in fresh namespaces, for the aggregate status target.
	NewFirewalls int
	// RealNodes run a real agent; LabPods pods with real interfaces each (in the first
	// namespaces, whose EgressFirewalls the change trials edit).
	RealNodes, LabPods int
}

var sizes = map[string]size{
	"full":  {Nodes: 5000, Pods: 150000, Namespaces: 10000, EgressQoS: 1000, EgressIPs: 100, EgressIPPods: 10000, EgressServices: 100, NewFirewalls: 1000, RealNodes: 2, LabPods: 30},
	"small": {Nodes: 50, Pods: 1500, Namespaces: 100, EgressQoS: 10, EgressIPs: 10, EgressIPPods: 100, EgressServices: 10, NewFirewalls: 100, RealNodes: 2, LabPods: 10},
}

func (s size) podsPerNamespace() int { return max(1, s.Pods/s.Namespaces) }

func main() {
	name := flag.String("size", "full", "full or small")
	steady := flag.Duration("steady", time.Minute, "how long the steady cluster's CPU is measured")
	trials := flag.Int("trials", 50, "EgressFirewall changes timed")
	profiles := flag.String("profiles", "", "a directory: the agents and the controller run with --profiling, and their heap profiles after the steady minute go there")
	fresh := flag.Bool("fresh", false, "populate the cluster even if an earlier run kept one of this size and generators")
	wait := flag.Duration("wait", 6*time.Minute, "the longest wait for aggregate statuses, and for the change trials: a target missed by far is reported as such rather than waited out")
	flag.Parse()
	s, ok := sizes[*name]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown -size %q: full or small\n", *name)
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "the scale harness needs root (network namespaces, bpf, nftables)")
		os.Exit(2)
	}
	if *profiles != "" {
		// Made before the half hour of filling the cluster, not found missing after it.
		if err := os.MkdirAll(*profiles, 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "-profiles: %v\n", err)
			os.Exit(2)
		}
	}
	h := &harness{s: s, name: *name, steady: *steady, trials: *trials, wait: *wait, profiles: *profiles, fresh: *fresh, log: os.Stderr, start: time.Now()}
	err := h.run(context.Background())
	h.report(os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

type harness struct {
	s      size
	name   string
	steady time.Duration
	trials int
	wait   time.Duration
	// profiles is where heap profiles go ("": none taken)
	profiles string
	// fresh populates the cluster even when a populated one is kept
	fresh bool
	log   io.Writer
	start time.Time

	cp   *controlplane.ControlPlane
	meta metadata.Interface
	lab  *lab.Lab
	c    *cluster
	dir  string
	// statuses of the EgressFirewalls, watched from the first wait for them
	statuses *firewallStatuses

	// results, printed by report in the order measured
	results []result
}

type result struct{ what, value, target string }

func (h *harness) record(what, value, target string) {
	h.results = append(h.results, result{what, value, target})
	fmt.Fprintf(h.log, "[%s] %s: %s\n", time.Since(h.start).Round(time.Second), what, value)
}

func (h *harness) logf(format string, a ...any) {
	fmt.Fprintf(h.log, "[%s] %s\n", time.Since(h.start).Round(time.Second), fmt.Sprintf(format, a...))
}

func (h *harness) report(w io.Writer) {
	s := h.s
	fmt.Fprintf(w, "\negressd scale, size %s: %d nodes (kwok) + %d real, %d pods + %d real, %d namespaces with an EgressFirewall each, %d EgressQoS, %d EgressIPs over %d pods, %d EgressServices; %d CPUs\n",
		h.name, s.Nodes, s.RealNodes, s.Pods, s.RealNodes*s.LabPods, s.Namespaces, s.EgressQoS, s.EgressIPs, s.EgressIPPods, s.EgressServices, runtime.NumCPU())
	for _, r := range h.results {
		line := fmt.Sprintf("  %-66s %s", r.what+":", r.value)
		if r.target != "" {
			line += "  (target " + r.target + ")"
		}
		fmt.Fprintln(w, line)
	}
}

func (h *harness) run(ctx context.Context) error {
	var err error
	if h.dir, err = os.MkdirTemp("", "egressd-scale-"); err != nil {
		return err
	}
	defer os.RemoveAll(h.dir)
	agents0, ctl0, err := h.baseline(ctx)
	if err != nil {
		return err
	}
	data, err := h.populated(ctx)
	if err != nil {
		return err
	}
	h.logf("control plane on the populated cluster")
	if h.cp, err = controlplane.Start(ctx, controlplane.Options{Log: h.log, EtcdData: data}); err != nil {
		return err
	}
	defer h.cp.Stop()
	if h.c, err = newCluster(h, h.cp); err != nil {
		return err
	}
	h.logf("kwok")
	if _, err = startKwok(h.log, h.dir, h.cp.Kubeconfig); err != nil {
		return err
	}
	if err := h.startLab(ctx); err != nil {
		return err
	}
	defer h.lab.Close()
	if err := h.lab.PrepareAgents(ctx); err != nil {
		return err
	}
	if h.meta, err = metadata.NewForConfig(h.cp.Config); err != nil {
		return err
	}
	running := h.c.watchPods(ctx)
	if err := h.labPods(ctx); err != nil {
		return err
	}
	// kwok finds its pods running already; this only checks it manages them.
	if err := h.c.awaitRunning(ctx, running, 5*time.Minute, h.dir); err != nil {
		return err
	}

	// Initial sync: every agent started at once, as a DaemonSet rollout would.
	h.logf("agents start on the full cluster")
	req0, err := dispatched(ctx, h.c.kube, agentFlow)
	if err != nil {
		return err
	}
	begin := time.Now()
	errs := make(chan error, len(h.lab.Nodes))
	for _, n := range h.lab.Nodes {
		go func() {
			err := n.StartAgent(ctx)
			if err == nil {
				h.logf("agent on %s ready after %s", n.Name, time.Since(begin).Round(10*time.Millisecond))
			}
			errs <- err
		}()
	}
	for range h.lab.Nodes {
		if err := <-errs; err != nil {
			return err
		}
	}
	h.record("agent initial sync (start -> ready, first sync applied)", time.Since(begin).Round(10*time.Millisecond).String(), "")
	req1, err := dispatched(ctx, h.c.kube, agentFlow)
	if err != nil {
		return err
	}
	h.record("API requests per agent, start -> ready", fmt.Sprintf("%.0f", (req1-req0)/float64(len(h.lab.Nodes))), "")
	agentsBegin, begin := begin, time.Now()
	if err := h.lab.Nodes[0].StartController(ctx); err != nil {
		return err
	}
	h.record("controller start -> ready", time.Since(begin).Round(10*time.Millisecond).String(), "")
	apiServer := h.profileFor(30*time.Second, "profile", "kube-apiserver.statuses.cpu.pprof", "the API server while the statuses settle", h.apiServerProfile)
	settled, err := h.awaitAggregates(ctx, "agents start -> every EgressFirewall's aggregate status applied", agentsBegin, "", h.s.Namespaces, "")
	apiServer()
	if err != nil {
		return err
	}
	qosSettled, err := h.awaitQoS(ctx, agentsBegin)
	if err != nil {
		return err
	}
	settled = settled && qosSettled

	if err := h.steadyState(ctx, agents0, ctl0, settled); err != nil {
		return err
	}
	if err := h.changeLatency(ctx); err != nil {
		return err
	}
	err = h.createFirewalls(ctx)
	h.record("controller's Lease terms, start -> end", leaseTerms(h.lab.Nodes[0].Controller.LogPath)+" in "+time.Since(begin).Round(time.Second).String(), "")
	return err
}

// leaseTerms counts the terms the controller logged at path began, as text.
func leaseTerms(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return strconv.Itoa(bytes.Count(b, []byte("started leading")))
}

// newCluster is the generators' clients of cp.
func newCluster(h *harness, cp *controlplane.ControlPlane) (*cluster, error) {
	cfg := rest.CopyConfig(cp.Config)
	// The generators are many clients at once (kubelets, users); protobuf spares the API
	// server's CPU, which the 2-core machine shares with everything measured.
	cfg.QPS, cfg.Burst = 5000, 10000
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	c := &cluster{s: h.s, log: h.log, workers: 32}
	var err error
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	ovnCfg := rest.CopyConfig(cfg)
	ovnCfg.ContentType = "" // CRDs speak JSON only
	c.ovn, err = versioned.NewForConfig(ovnCfg)
	return c, err
}

// startLab starts the lab's nodes on h.cp, their agents and the controller stopped, with the
// DNS server the dnsName rules ask and the FlowSchemas that count the agents' requests.
func (h *harness) startLab(ctx context.Context) error {
	// The first lab node hosts the egress IPs (and EgressServices); the others, as most nodes
	// of a cluster, none: their agents read only their own pods.
	labels := map[int]map[string]string{0: {egressip.AssignableLabel: ""}}
	h.logf("lab: %d nodes", h.s.RealNodes)
	agentArgs := []string{"--dns-server", "198.51.100.53:53"}
	// The fake nodes run no agent: their entries must not hold the aggregate statuses.
	controllerArgs := []string{"--status-ignore-nodes", kwokLabel + "=" + kwokValue}
	if h.profiles != "" {
		agentArgs, controllerArgs = append(agentArgs, "--profiling"), append(controllerArgs, "--profiling")
	}
	var err error
	if h.lab, err = lab.Start(ctx, h.cp, lab.Options{
		Nodes: h.s.RealNodes, NodeLabels: labels, NodePrefix: "scale-",
		AgentArgs: agentArgs, ControllerArgs: controllerArgs,
		ReadyTimeout: 30 * time.Minute, Log: h.log,
	}); err != nil {
		return err
	}
	dns, err := h.lab.AddDNS("dns", "198.51.100.53")
	if err != nil {
		return err
	}
	for k := range dnsNames {
		dns.Set(dnsName(k), 300, fmt.Sprintf("203.0.113.%d", k%250+1))
	}
	return flowSchemas(ctx, h.c.kube, map[string]string{agentFlow: kube.DeployedAgent, controllerFlow: kube.DeployedController})
}

// baseline measures the agents and the controller on an empty cluster: a control plane and
// lab of their own, the lab's nodes alone.
func (h *harness) baseline(ctx context.Context) (agents []usage, ctl usage, err error) {
	h.logf("agents and controller on an empty cluster")
	if h.cp, err = controlplane.Start(ctx, controlplane.Options{Log: h.log}); err != nil {
		return nil, ctl, err
	}
	defer h.cp.Stop()
	if h.c, err = newCluster(h, h.cp); err != nil {
		return nil, ctl, err
	}
	if err := h.startLab(ctx); err != nil {
		return nil, ctl, err
	}
	defer h.lab.Close()
	if err := h.lab.StartAgents(ctx); err != nil {
		return nil, ctl, err
	}
	time.Sleep(5 * time.Second)
	if agents, ctl, err = h.usage(); err != nil {
		return nil, ctl, err
	}
	h.record("agent RSS, empty cluster", mb(agents[0].rss), "")
	h.record("controller RSS, empty cluster", mb(ctl.rss), "")
	return agents, ctl, nil
}

// usage reads each lab node's agent, and the controller.
func (h *harness) usage() (agents []usage, c usage, err error) {
	for _, n := range h.lab.Nodes {
		a, err := read(n.Agent)
		if err != nil {
			return nil, c, err
		}
		agents = append(agents, a)
	}
	c, err = read(h.lab.Nodes[0].Controller)
	return agents, c, err
}

// watchPods counts the fake nodes' pods that are Running with an address, from an informer
// that keeps only what the count needs.
func (c *cluster) watchPods(ctx context.Context) (running func() int) {
	lw := cache.NewFilteredListWatchFromClient(c.kube.CoreV1().RESTClient(), "pods", metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.FieldSelector = "status.phase=Running"
	})
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	_ = inf.SetTransform(func(o any) (any, error) {
		if p, ok := o.(*corev1.Pod); ok {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, ResourceVersion: p.ResourceVersion, Labels: p.Labels},
				Spec: corev1.PodSpec{NodeName: p.Spec.NodeName}, Status: corev1.PodStatus{PodIP: p.Status.PodIP}}, nil
		}
		return o, nil
	})
	go inf.Run(ctx.Done())
	return func() int {
		n := 0
		for _, o := range inf.GetStore().List() {
			if p := o.(*corev1.Pod); p.Status.PodIP != "" && p.Labels[labPodLabel] == "" {
				n++
			}
		}
		return n
	}
}

// labPodLabel marks the lab's pods (real interfaces), which the kwok count leaves out.
const labPodLabel = "scale.egressd.io/lab"

// labPods adds LabPods pods with real interfaces to each real node, namespace k for the k-th,
// so that the nodes enforce those namespaces' EgressFirewalls on live pods.
func (h *harness) labPods(ctx context.Context) error {
	for _, n := range h.lab.Nodes {
		for k := range h.s.LabPods {
			if _, err := n.AddPod(ctx, nsName(k), fmt.Sprintf("lab-%s-%d", n.Name, k), lab.PodOptions{
				Labels: map[string]string{"app": "web", "tier": fmt.Sprint(k % 3), labPodLabel: "true"}, WithoutEgressdCNI: true,
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// awaitAggregates waits, at most h.wait, until count EgressFirewalls (those labelled label, or
// all) have the aggregate status applied, and records the time since begin under what; or,
// when the wait ends first, how far the agents' entries and the aggregates got.
func (h *harness) awaitAggregates(ctx context.Context, what string, begin time.Time, label string, count int, target string) (done bool, err error) {
	deadline := time.Now().Add(h.wait)
	if h.statuses == nil {
		h.statuses = h.watchFirewallStatuses(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), h.statuses.synced) {
		return false, ctx.Err()
	}
	stop := progress(h.log, func() string {
		applied, entries, _ := h.statuses.count(label) // the store is safe to read from here
		return fmt.Sprintf("aggregate statuses applied %d/%d, node entries %d/%d", applied, count, entries, count*h.s.RealNodes)
	})
	defer stop()
	for {
		applied, entries, err := h.statuses.count(label)
		if err != nil {
			return false, err
		}
		if applied >= count {
			h.record(what, time.Since(begin).Round(100*time.Millisecond).String(), target)
			return true, nil
		}
		if time.Now().After(deadline) {
			h.record(what, fmt.Sprintf("not within %s: %d/%d applied, %d/%d node entries written (%.1f/s)",
				time.Since(begin).Round(time.Second), applied, count, entries, count*h.s.RealNodes, float64(entries)/time.Since(begin).Seconds()), target)
			return false, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createFirewalls creates NewFirewalls EgressFirewalls at once, in namespaces made for them
// beforehand, and times it until the aggregate status of every one says applied.
func (h *harness) createFirewalls(ctx context.Context) error {
	from, n := h.s.Namespaces, h.s.NewFirewalls
	if err := h.c.parallel(ctx, "new namespaces", n, func(ctx context.Context, k int) error {
		_, err := h.c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(from + k)}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	const label = "scale.egressd.io/new"
	// Creating them was most of the target's time: the API server's profile shows why.
	apiServer := h.profileFor(15*time.Second, "profile", "kube-apiserver.creates.cpu.pprof", "the API server while the EgressFirewalls are created", h.apiServerProfile)
	defer apiServer()
	begin := time.Now()
	if err := h.c.firewalls(ctx, "new EgressFirewalls", from, from+n, label); err != nil {
		return err
	}
	created := time.Since(begin).Round(10 * time.Millisecond)
	_, err := h.awaitAggregates(ctx, fmt.Sprintf("%d EgressFirewalls created (in %s) -> every aggregate status applied", n, created), begin, label, n, "<= 10 s")
	return err
}
