package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/egressd/egressd/api/generated/clientset/versioned"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/nodeagent/egressip"
)

// Labels the generated objects carry.
const (
	// eipLabel on a namespace selects it for EgressIP <value>.
	eipLabel = "scale.egressd.io/egressip"
	// infraLabel marks one fake node in 100: the EgressFirewalls' nodeSelector rule allows them.
	infraLabel = "scale.egressd.io/infra"
)

// cluster is what populate creates.
type cluster struct {
	s       size
	kube    kubernetes.Interface
	ovn     versioned.Interface
	log     io.Writer
	workers int
}

// namespace i's name.
func nsName(i int) string { return fmt.Sprintf("scale-%05d", i) }

// fakeNode i's name.
func fakeNode(i int) string { return fmt.Sprintf("kwok-node-%04d", i) }

// parallel runs f(0..n-1) on c.workers goroutines, printing progress every 5 s; the first error
// stops it. An object that exists already counts as created: a run can resume after a failure
// of the API server under load.
func (c *cluster) parallel(ctx context.Context, what string, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next, done atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := progress(c.log, func() string {
		d := done.Load()
		return fmt.Sprintf("%s: %d/%d (%.0f/s)", what, d, n, float64(d)/time.Since(start).Seconds())
	})
	defer stop()
	for range c.workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil && !apierrors.IsAlreadyExists(err) {
					cancel(fmt.Errorf("%s %d: %w", what, i, err))
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	fmt.Fprintf(c.log, "%s: %d in %s\n", what, n, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// nodes creates the fake nodes with the status a kubelet reports (Ready, distinct addresses),
// which kwok then only refreshes.
func (c *cluster) nodes(ctx context.Context) error {
	return c.parallel(ctx, "nodes", c.s.Nodes, func(ctx context.Context, i int) error {
		name := fakeNode(i)
		labels := map[string]string{kwokLabel: kwokValue, "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
		if i%100 == 0 {
			labels[infraLabel] = "true"
		}
		cidr := fmt.Sprintf("10.%d.%d.0/24", 100+i/256, i%256)
		if _, err := c.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
			Spec:       corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
		}, metav1.CreateOptions{}); err != nil {
			return err
		}
		now := metav1.Now()
		status, err := json.Marshal(map[string]corev1.NodeStatus{"status": {
			Phase: corev1.NodeRunning, // what kwok's heartbeat stage selects
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("172.20.%d.%d", i/250, i%250+1)},
				{Type: corev1.NodeHostName, Address: name},
			},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: now, LastTransitionTime: now}},
			Capacity:    corev1.ResourceList{"pods": resource.MustParse("110")},
			Allocatable: corev1.ResourceList{"pods": resource.MustParse("110")},
		}})
		if err != nil {
			return err
		}
		// A merge patch: kwok may have initialized the node already (with an address of its
		// own, which this replaces); if not, it leaves a Ready node as it is.
		_, err = c.kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, status, metav1.PatchOptions{}, "status")
		return err
	})
}

// eipNamespaces are the names of the namespaces the EgressIPs select.
func (c *cluster) eipNamespaces() []string {
	if c.s.EgressIPs == 0 {
		return nil
	}
	out := make([]string, (c.s.EgressIPPods+c.s.podsPerNamespace()-1)/c.s.podsPerNamespace())
	for i := range out {
		out[i] = nsName(i)
	}
	return out
}

// namespaces creates the namespaces; those holding the first EgressIPPods pods are labelled for
// the EgressIPs, in turn.
func (c *cluster) namespaces(ctx context.Context) error {
	eipNamespaces := len(c.eipNamespaces())
	return c.parallel(ctx, "namespaces", c.s.Namespaces, func(ctx context.Context, i int) error {
		labels := map[string]string{"team": fmt.Sprint(i % 20)}
		if i < eipNamespaces {
			labels[eipLabel] = fmt.Sprint(i % c.s.EgressIPs)
		}
		_, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i), Labels: labels}}, metav1.CreateOptions{})
		return err
	})
}

// pods creates the pods, spread over the fake nodes round robin; kwok runs them.
func (c *cluster) pods(ctx context.Context) error {
	per := c.s.podsPerNamespace()
	return c.parallel(ctx, "pods", c.s.Pods, func(ctx context.Context, i int) error {
		ns := nsName(i / per)
		_, err := c.kube.CoreV1().Pods(ns).Create(ctx, scalePod(fmt.Sprintf("app-7d9f8c6b5-%05d", i%per), i%per, fakeNode(i%c.s.Nodes)), metav1.CreateOptions{})
		return err
	})
}

// scalePod looks like a Deployment's pod: labels, owner hash, annotations, a container spec.
func scalePod(name string, i int, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{"app": "web", "pod-template-hash": "7d9f8c6b5", "tier": fmt.Sprint(i % 3)},
			Annotations: map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-01T10:00:00Z", "prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
		},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.example/app:v1.2.3",
				Args:  []string{"--listen=:8080", "--metrics=:9090", "--log-level=info"},
				Env:   []corev1.EnvVar{{Name: "MODE", Value: "production"}, {Name: "CACHE_SIZE", Value: "512"}},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
			}},
		},
	}
}

// dnsNames is how many distinct names the EgressFirewalls' dnsName rules use (a few hundred
// services that thousands of namespaces reach), served by the lab's DNS.
const dnsNames = 200

func dnsName(k int) string { return fmt.Sprintf("svc-%03d.scale.example", k%dnsNames) }

// firewallRules are namespace i's 10 rules, two of them dnsName and one a nodeSelector;
// extra adds that many Deny rules before the last (the change the latency trials make).
func firewallRules(i, extra int) []ovnv1.EgressFirewallRule {
	tcp := func(p int32) []ovnv1.EgressFirewallPort {
		return []ovnv1.EgressFirewallPort{{Protocol: "TCP", Port: p}}
	}
	rules := []ovnv1.EgressFirewallRule{
		{Type: ovnv1.EgressFirewallRuleAllow, To: ovnv1.EgressFirewallDestination{CIDRSelector: fmt.Sprintf("203.0.113.%d/32", i%250)}, Ports: tcp(443)},
		{Type: ovnv1.EgressFirewallRuleAllow, To: ovnv1.EgressFirewallDestination{DNSName: dnsName(i)}},
		{Type: ovnv1.EgressFirewallRuleAllow, To: ovnv1.EgressFirewallDestination{DNSName: dnsName(i + 7)}, Ports: tcp(443)},
		{Type: ovnv1.EgressFirewallRuleAllow, To: ovnv1.EgressFirewallDestination{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{infraLabel: "true"}}}},
		{Type: ovnv1.EgressFirewallRuleAllow, To: ovnv1.EgressFirewallDestination{CIDRSelector: fmt.Sprintf("198.18.%d.0/24", i%256)}},
		{Type: ovnv1.EgressFirewallRuleAllow, To: ovnv1.EgressFirewallDestination{CIDRSelector: fmt.Sprintf("100.64.%d.0/22", i%64*4)}, Ports: tcp(5432)},
		{Type: ovnv1.EgressFirewallRuleDeny, To: ovnv1.EgressFirewallDestination{CIDRSelector: "169.254.169.254/32"}},
		{Type: ovnv1.EgressFirewallRuleAllow, To: ovnv1.EgressFirewallDestination{CIDRSelector: fmt.Sprintf("2001:db8:%x::/48", i%65536)}},
		{Type: ovnv1.EgressFirewallRuleDeny, To: ovnv1.EgressFirewallDestination{CIDRSelector: "::/0"}},
	}
	for k := range extra {
		rules = append(rules, ovnv1.EgressFirewallRule{Type: ovnv1.EgressFirewallRuleDeny, To: ovnv1.EgressFirewallDestination{CIDRSelector: fmt.Sprintf("192.0.2.%d/32", k)}})
	}
	return append(rules, ovnv1.EgressFirewallRule{Type: ovnv1.EgressFirewallRuleDeny, To: ovnv1.EgressFirewallDestination{CIDRSelector: "0.0.0.0/0"}})
}

// firewalls creates one EgressFirewall (named default, as upstream requires) in each of the
// namespaces [from, to), labelled with label when it is not "".
func (c *cluster) firewalls(ctx context.Context, what string, from, to int, label string) error {
	return c.parallel(ctx, what, to-from, func(ctx context.Context, k int) error {
		i := from + k
		ef := &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: nsName(i)},
			Spec: ovnv1.EgressFirewallSpec{Egress: firewallRules(i, 0)}}
		if label != "" {
			ef.Labels = map[string]string{label: "true"}
		}
		_, err := c.ovn.K8sOVNV1().EgressFirewalls(nsName(i)).Create(ctx, ef, metav1.CreateOptions{})
		return err
	})
}

// qos creates EgressQoS in the first EgressQoS namespaces: three rules, one for a tier.
func (c *cluster) qos(ctx context.Context) error {
	return c.parallel(ctx, "EgressQoS", c.s.EgressQoS, func(ctx context.Context, i int) error {
		cidr := fmt.Sprintf("198.19.%d.0/24", i%256)
		_, err := c.ovn.K8sOVNV1().EgressQoSes(nsName(i)).Create(ctx, &ovnv1.EgressQoS{
			ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: nsName(i)},
			Spec: ovnv1.EgressQoSSpec{Egress: []ovnv1.EgressQoSRule{
				{DSCP: 46, DstCIDR: &cidr, PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "0"}}},
				{DSCP: 26, DstCIDR: &cidr},
				{DSCP: 10},
			}},
		}, metav1.CreateOptions{})
		return err
	})
}

// egressIPs creates the EgressIPs, each with one address of the lab's fabric (hosted by a lab
// node, the only egress-assignable ones), selecting its labelled namespaces' pods.
func (c *cluster) egressIPs(ctx context.Context) error {
	return c.parallel(ctx, "EgressIPs", c.s.EgressIPs, func(ctx context.Context, i int) error {
		_, err := c.ovn.K8sOVNV1().EgressIPs().Create(ctx, &ovnv1.EgressIP{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("scale-%03d", i)},
			Spec: ovnv1.EgressIPSpec{
				EgressIPs:         []ovnv1.IPAddress{ovnv1.IPAddress(fmt.Sprintf("172.18.0.%d", 100+i))},
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{eipLabel: fmt.Sprint(i)}},
			},
			Status: ovnv1.EgressIPStatus{Items: []ovnv1.EgressIPStatusItem{}}, // required, as upstream's CRD has it
		}, metav1.CreateOptions{})
		return err
	})
}

// egressServices creates, in the last EgressServices namespaces, a LoadBalancer Service over
// the namespace's pods (its ingress IP written as a load balancer controller would) and its
// EgressService, hosted by an egress-assignable (lab) node.
func (c *cluster) egressServices(ctx context.Context) error {
	return c.parallel(ctx, "EgressServices", c.s.EgressServices, func(ctx context.Context, k int) error {
		ns := nsName(c.s.Namespaces - 1 - k)
		svc, err := c.kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("192.0.2.%d", k%250+1)}}
		if _, err := c.kube.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
			return err
		}
		_, err = c.ovn.K8sOVNV1().EgressServices(ns).Create(ctx, &ovnv1.EgressService{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: ovnv1.EgressServiceSpec{SourceIPBy: ovnv1.SourceIPLoadBalancer,
				NodeSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: egressip.AssignableLabel, Operator: metav1.LabelSelectorOpExists}}}},
		}, metav1.CreateOptions{})
		return err
	})
}

// populate creates the cluster kwok plays, then waits until kwok runs every pod.
func (c *cluster) populate(ctx context.Context, dir string) error {
	fmt.Fprintln(c.log, "populating")
	running := c.watchPods(ctx)
	steps := []struct {
		name string
		f    func(context.Context) error
	}{
		{"nodes", c.nodes}, {"namespaces", c.namespaces}, {"pods", c.pods},
		{"EgressFirewalls", func(ctx context.Context) error { return c.firewalls(ctx, "EgressFirewalls", 0, c.s.Namespaces, "") }},
		{"EgressQoS", c.qos}, {"EgressIPs", c.egressIPs}, {"EgressServices", c.egressServices},
	}
	for _, st := range steps {
		if err := st.f(ctx); err != nil {
			return fmt.Errorf("%s: %w\nkwok: %s", st.name, err, kwokLogTail(dir))
		}
	}
	return c.awaitRunning(ctx, running, 20*time.Minute, dir)
}

// awaitRunning waits at most d until running counts every pod.
func (c *cluster) awaitRunning(ctx context.Context, running func() int, d time.Duration, dir string) error {
	stop := progress(c.log, func() string { return fmt.Sprintf("pods running with an address: %d/%d", running(), c.s.Pods) })
	defer stop()
	deadline := time.Now().Add(d)
	for running() < c.s.Pods {
		if time.Now().After(deadline) {
			return fmt.Errorf("kwok ran %d of %d pods in %s\n%s", running(), c.s.Pods, d, kwokLogTail(dir))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return nil
}
