package nodeagent

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// scaleCluster is what the egress node of make bench-scale's full size holds in its caches:
// 5,000 nodes, 10,000 namespaces each with an EgressFirewall of 10 rules (two dnsName, one
// nodeSelector), 1,000 EgressQoS, 100 EgressIPs assigned to it selecting the 10,000 pods of
// their namespaces (the other nodes' pods it serves), and 30 pods of its own.
func scaleCluster() []runtime.Object {
	const nodes, namespaces, qos, eips, eipPods, perNamespace = 5000, 10000, 1000, 100, 10000, 30
	objs := []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{egressip.AssignableLabel: ""}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.18.0.2"}}}}}
	for i := range nodes {
		labels := map[string]string{"kubernetes.io/hostname": fmt.Sprintf("kwok-%04d", i)}
		if i%100 == 0 {
			labels["infra"] = "true"
		}
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("kwok-%04d", i), Labels: labels},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("172.20.%d.%d", i/250, i%250+1)}}}})
	}
	pod := func(ns string, i int, node string, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%05d", i), Namespace: ns,
			Labels: map[string]string{"app": "web", "tier": fmt.Sprint(i % 3)}},
			Spec:   corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
	}
	for i := range namespaces {
		ns := fmt.Sprintf("scale-%05d", i)
		labels := map[string]string{"team": fmt.Sprint(i % 20)}
		if i < eipPods/perNamespace+1 {
			labels["egressip"] = fmt.Sprint(i % eips)
			for k := range perNamespace {
				j := i*perNamespace + k
				objs = append(objs, pod(ns, k, fmt.Sprintf("kwok-%04d", j%nodes), fmt.Sprintf("10.%d.%d.%d", 100+j/65536, j/256%256, j%256)))
			}
		}
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}},
			&ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns, UID: types.UID("ef-" + ns), Generation: 1}, Spec: ovnv1.EgressFirewallSpec{Egress: scaleRules(i, 0)}})
		if i < qos {
			cidr := fmt.Sprintf("198.19.%d.0/24", i%256)
			objs = append(objs, &ovnv1.EgressQoS{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns},
				Spec: ovnv1.EgressQoSSpec{Egress: []ovnv1.EgressQoSRule{{DSCP: 46, DstCIDR: &cidr}, {DSCP: 10}}}})
		}
	}
	for k := range perNamespace { // the node's own, in the first namespaces
		objs = append(objs, pod(fmt.Sprintf("scale-%05d", k), 100+k, "n", fmt.Sprintf("10.244.0.%d", k+2)))
	}
	for i := range eips {
		objs = append(objs, &ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("scale-%03d", i)}, Spec: ovnv1.EgressIPSpec{
			EgressIPs:         []ovnv1.IPAddress{ovnv1.IPAddress(fmt.Sprintf("172.18.0.%d", 100+i))},
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egressip": fmt.Sprint(i)}}},
			Status: ovnv1.EgressIPStatus{Items: []ovnv1.EgressIPStatusItem{{Node: "n", EgressIP: fmt.Sprintf("172.18.0.%d", 100+i)}}}})
	}
	return objs
}

// scaleRules are namespace i's rules as the scale harness writes them, with extra Deny rules.
func scaleRules(i, extra int) []ovnv1.EgressFirewallRule {
	to := func(cidr string) ovnv1.EgressFirewallDestination {
		return ovnv1.EgressFirewallDestination{CIDRSelector: cidr}
	}
	rules := []ovnv1.EgressFirewallRule{
		{Type: ovnv1.EgressFirewallRuleAllow, To: to(fmt.Sprintf("203.0.113.%d/32", i%250))},
		{Type: ovnv1.EgressFirewallRuleAllow, To: ovnv1.EgressFirewallDestination{DNSName: fmt.Sprintf("svc-%03d.scale.example", i%200)}},
		{Type: ovnv1.EgressFirewallRuleAllow, To: ovnv1.EgressFirewallDestination{DNSName: fmt.Sprintf("svc-%03d.scale.example", (i+7)%200)}},
		{Type: ovnv1.EgressFirewallRuleAllow, To: ovnv1.EgressFirewallDestination{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"infra": "true"}}}},
		{Type: ovnv1.EgressFirewallRuleAllow, To: to(fmt.Sprintf("198.18.%d.0/24", i%256))},
		{Type: ovnv1.EgressFirewallRuleAllow, To: to(fmt.Sprintf("100.64.%d.0/22", i%64*4))},
		{Type: ovnv1.EgressFirewallRuleDeny, To: to("169.254.169.254/32")},
		{Type: ovnv1.EgressFirewallRuleAllow, To: to(fmt.Sprintf("2001:db8:%x::/48", i%65536))},
		{Type: ovnv1.EgressFirewallRuleDeny, To: to("::/0")},
	}
	for k := range extra {
		rules = append(rules, ovnv1.EgressFirewallRule{Type: ovnv1.EgressFirewallRuleDeny, To: to(fmt.Sprintf("192.0.2.%d/32", k))})
	}
	return append(rules, ovnv1.EgressFirewallRule{Type: ovnv1.EgressFirewallRuleDeny, To: to("0.0.0.0/0")})
}

// BenchmarkSync: on the egress node of the scale harness's cluster, one object changes and the
// node syncs (the apply excepted): what a change costs before it reaches the kernel. Each
// step's time per sync is reported. FirewallChange: one namespace's EgressFirewall;
// ServedPodChange: the labels of one of the other nodes' pods its EgressIPs serve.
func BenchmarkSync(b *testing.B) {
	for _, c := range []struct {
		name   string
		change func(snap *watchers.Snapshot, i int) runtime.Object
		kind   any
	}{
		{"FirewallChange", func(snap *watchers.Snapshot, i int) runtime.Object {
			ef, _ := snap.EgressFirewalls.EgressFirewalls("scale-00000").Get("default")
			ef = ef.DeepCopy()
			ef.Spec.Egress = scaleRules(0, i%2)
			ef.Generation++
			return ef
		}, &ovnv1.EgressFirewall{}},
		{"ServedPodChange", func(snap *watchers.Snapshot, i int) runtime.Object {
			p, _ := snap.Pods.Pods("scale-00100").Get("app-00007")
			p = p.DeepCopy()
			p.Labels["revision"] = fmt.Sprint(i)
			return p
		}, &corev1.Pod{}},
	} {
		b.Run(c.name, func(b *testing.B) {
			snap, update := watcherstest.Updatable(scaleCluster()...)
			snap.Generations = watchers.NewGenerations(&corev1.Node{}, &corev1.Namespace{}, &corev1.Pod{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}, &ovnv1.EgressFirewall{},
				&ovnv1.EgressQoS{}, &ovnv1.EgressIP{}, &ovnv1.AdminPolicyBasedExternalRoute{}, &ovnv1.EgressService{}).Journaled(&ovnv1.EgressFirewall{}, &corev1.Pod{})
			l := newLoop(&recordingApplier{}, make(chan struct{}), 0, func(_ *Config, d *Deps) { d.Snapshot = snap })
			l.sync(b.Context()) // the first: everything compiled once
			first := stepSums(b, l.deps.Metrics)
			i := 0
			for b.Loop() {
				i++
				o := c.change(snap, i)
				update(o)
				key, _ := cache.MetaNamespaceKeyFunc(o)
				snap.Generations.Changed(c.kind, key)
				l.sync(b.Context())
			}
			b.StopTimer()
			for step, sum := range stepSums(b, l.deps.Metrics) {
				b.ReportMetric((sum-first[step])/float64(i)*1e3, step+"-ms/sync")
			}
		})
	}
}

// stepSums are the seconds each step of the loop's syncs took so far, by step.
func stepSums(b *testing.B, m *Metrics) map[string]float64 {
	ch := make(chan prometheus.Metric, 64)
	m.SyncDuration.Collect(ch)
	close(ch)
	sums := map[string]float64{}
	for metric := range ch {
		var d dto.Metric
		if err := metric.Write(&d); err != nil {
			b.Fatal(err)
		}
		sums[d.GetLabel()[0].GetValue()] = d.GetHistogram().GetSampleSum()
	}
	return sums
}
