package watchers

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kubefake "k8s.io/client-go/kubernetes/fake"

	egressfake "github.com/egressd/egressd/api/generated/clientset/versioned/fake"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

func TestStatusOnlyUpdates(t *testing.T) {
	ef := func(gen int64, labels map[string]string, msgs ...string) *ovnv1.EgressFirewall {
		return &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Generation: gen, Labels: labels}, Status: ovnv1.EgressFirewallStatus{Messages: msgs}}
	}
	if !statusOnly(ef(1, nil), ef(1, nil, "n: EgressFirewall Rules applied")) {
		t.Error("a status write counted as a spec change")
	}
	if statusOnly(ef(1, nil), ef(2, nil)) {
		t.Error("a spec change (new generation) counted as status only")
	}
	if statusOnly(ef(1, nil), ef(1, map[string]string{"a": "b"})) {
		t.Error("a label change counted as status only")
	}
	recreated := ef(1, nil)
	recreated.UID = "another"
	if statusOnly(ef(1, nil), recreated) {
		t.Error("an object deleted and created again (another UID, a relist's update) counted as status only")
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	if statusOnly(pod, pod.DeepCopy()) {
		t.Error("pod updates always matter (IPs, readiness live in status)")
	}
	w := &Watchers{}
	spec, all := w.Subscribe(false), w.Subscribe(true)
	nodes := w.Subscribe(true, &corev1.Node{})
	w.signal(&ovnv1.EgressFirewall{}, false)
	select {
	case <-spec:
		t.Error("status-only change reached a spec subscriber")
	default:
	}
	select {
	case <-all:
	default:
		t.Error("status-only change did not reach a status subscriber")
	}
	if !w.TakePending().IsZero() {
		t.Error("a status-only change counted as pending programming")
	}

	// A spec change reaches both subscribers and is pending from its first signal until taken.
	before := time.Now()
	w.signal(&ovnv1.EgressFirewall{}, true)
	after := time.Now()
	time.Sleep(time.Millisecond) // so that the second signal's time is after the first's
	w.signal(&ovnv1.EgressFirewall{}, true)
	select {
	case <-nodes:
		t.Error("a firewall's change reached a subscriber of nodes only")
	default:
	}
	w.signal(&corev1.Node{}, false)
	select {
	case <-nodes:
	default:
		t.Error("a node's change did not reach a subscriber of nodes")
	}
	for name, ch := range map[string]<-chan struct{}{"spec": spec, "status": all} {
		select {
		case <-ch:
		default:
			t.Errorf("a spec change did not reach the %s subscriber", name)
		}
	}
	if p := w.TakePending(); p.Before(before) || p.After(after) {
		t.Errorf("pending since %s, want the first signal's time, in [%s, %s]", p, before, after)
	}
	if !w.TakePending().IsZero() {
		t.Error("pending again without a new change")
	}
}

// Nodes program EgressServices from status.host: its change counts as a spec change.
func TestStatusOnlyEgressServiceHost(t *testing.T) {
	es := func(host string) *ovnv1.EgressService {
		return &ovnv1.EgressService{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: ovnv1.EgressServiceStatus{Host: host}}
	}
	if statusOnly(es(""), es("n1")) {
		t.Error("a new status.host counted as status only")
	}
	if !statusOnly(es("n1"), es("n1")) {
		t.Error("an unchanged EgressService counted as a spec change")
	}
}

// Generations moves with the informers' spec changes of the kinds asked, not with others; a
// snapshot without counts (built by hand) never reports "unchanged".
func TestGenerations(t *testing.T) {
	kube := kubefake.NewClientset()
	egress := egressfake.NewSimpleClientset()
	w, ctx := started(t, kube, egress)
	g := w.Snapshot().Generations
	firewallInputs := func() uint64 {
		n, ok := g.Of(&ovnv1.EgressFirewall{}, &corev1.Node{}, &corev1.Namespace{})
		if !ok {
			t.Fatal("watched kinds reported unknown")
		}
		return n
	}
	waitMoved := func(what string, from uint64) uint64 {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if n := firewallInputs(); n != from {
				return n
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("%s: the firewall inputs' generation did not move", what)
		return 0
	}
	start := firewallInputs()
	ef := &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "default", Generation: 1}}
	ef, err := egress.K8sOVNV1().EgressFirewalls("ns").Create(ctx, ef, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	afterEF := waitMoved("EgressFirewall created", start)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	afterNS := waitMoved("Namespace created", afterEF)

	// A pod and a status write of the firewall: the caches take them, the count stays.
	if _, err := kube.CoreV1().Pods("ns").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ef.Status.Messages = []string{"n: EgressFirewall Rules applied"}
	if _, err := egress.K8sOVNV1().EgressFirewalls("ns").UpdateStatus(ctx, ef, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	podMoved := func() bool { n, _ := g.Of(&corev1.Pod{}); return n > 0 }
	for deadline := time.Now().Add(5 * time.Second); !podMoved() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the status write's event is handled too
	if !podMoved() {
		t.Fatal("the pod's creation was not counted")
	}
	if n := firewallInputs(); n != afterNS {
		t.Errorf("a pod and a firewall status write moved the firewall inputs' generation (%d -> %d)", afterNS, n)
	}

	var none *Generations
	if _, ok := none.Of(&corev1.Node{}); ok {
		t.Error("no counts reported known")
	}
	if _, ok := g.Of(&corev1.ConfigMap{}); ok {
		t.Error("an unwatched kind reported known")
	}
}

// An update of what the cache does not keep (a pod's container statuses, a node's heartbeat)
// signals nothing and counts no generation; one of what it keeps (a pod's IP) does.
func TestUpdatesOfDroppedFieldsSignalNothing(t *testing.T) {
	kube := kubefake.NewClientset()
	w, err := New(kube, egressfake.NewSimpleClientset(), 0)
	if err != nil {
		t.Fatal(err)
	}
	changes := w.Subscribe(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := w.Start(ctx, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	g := w.Snapshot().Generations
	signalled := func() bool {
		select {
		case <-changes:
			return true
		case <-time.After(300 * time.Millisecond):
			return false
		}
	}
	pod, err := kube.CoreV1().Pods("ns").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for signalled() { // the creations
	}
	before, _ := g.Of(&corev1.Pod{}, &corev1.Node{})

	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", RestartCount: 3}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionFalse}}
	if pod, err = kube.CoreV1().Pods("ns").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
	if _, err = kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if signalled() {
		t.Error("a container status and a node heartbeat signalled a change")
	}
	if after, _ := g.Of(&corev1.Pod{}, &corev1.Node{}); after != before {
		t.Errorf("a container status and a node heartbeat moved the generations (%d -> %d)", before, after)
	}

	pod.Status.PodIP = "10.244.0.5"
	if _, err = kube.CoreV1().Pods("ns").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !signalled() {
		t.Error("a pod's new IP signalled no change")
	}
}

// OnlyPods caches only the pods its selector selects (the controller's router pods), the other
// kinds as before.
func TestOnlyPods(t *testing.T) {
	ctx := t.Context()
	kube := kubefake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "router", Labels: map[string]string{"app": "egress-router-cni"}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Labels: map[string]string{"app": "web"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	w, err := New(kube, egressfake.NewSimpleClientset(), 0, OnlyPods(labels.SelectorFromSet(labels.Set{"app": "egress-router-cni"})))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	pods, err := w.Snapshot().Pods.List(labels.Everything())
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	if err != nil || !slices.Equal(names, []string{"router"}) {
		t.Errorf("cached pods %v (%v), want only the router pod", names, err)
	}
	if nodes, _ := w.Snapshot().Nodes.List(labels.Everything()); len(nodes) != 1 {
		t.Errorf("cached nodes %d, want 1", len(nodes))
	}
}

// A status write brings a firewall again; of the same generation, the cache's new version
// shares its rules with the version before (which the compile may still hold), and a new
// generation brings its own.
func TestStatusWriteKeepsTheFirewallsRules(t *testing.T) {
	egress := egressfake.NewSimpleClientset()
	w, ctx := started(t, kubefake.NewClientset(), egress)
	cached := func(want func(*ovnv1.EgressFirewall) bool) *ovnv1.EgressFirewall {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if ef, err := w.Snapshot().EgressFirewalls.EgressFirewalls("ns").Get("default"); err == nil && want(ef) {
				return ef
			}
		}
		t.Fatal("the cache did not take the firewall's change")
		return nil
	}
	ef := &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "default", UID: "uid-1", Generation: 1},
		Spec: ovnv1.EgressFirewallSpec{Egress: []ovnv1.EgressFirewallRule{{Type: ovnv1.EgressFirewallRuleDeny, To: ovnv1.EgressFirewallDestination{CIDRSelector: "0.0.0.0/0"}}}}}
	if _, err := egress.K8sOVNV1().EgressFirewalls("ns").Create(ctx, ef, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := cached(func(*ovnv1.EgressFirewall) bool { return true })
	ef.Status.Messages = []string{"n: EgressFirewall Rules applied"}
	if _, err := egress.K8sOVNV1().EgressFirewalls("ns").UpdateStatus(ctx, ef, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	second := cached(func(ef *ovnv1.EgressFirewall) bool { return len(ef.Status.Messages) == 1 })
	if second == first || &second.Spec.Egress[0] != &first.Spec.Egress[0] {
		t.Error("a status write brought its own copy of the firewall's rules")
	}
	ef.Generation, ef.Spec.Egress[0].To.CIDRSelector = 2, "192.0.2.0/24"
	if _, err := egress.K8sOVNV1().EgressFirewalls("ns").Update(ctx, ef, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	third := cached(func(ef *ovnv1.EgressFirewall) bool { return ef.Generation == 2 })
	if got := third.Spec.Egress[0].To.CIDRSelector; got != "192.0.2.0/24" {
		t.Errorf("a new generation's rule %q, want its own", got)
	}
}

// started is Watchers of the clients, started until the test ends, and the context it runs in.
func started(t *testing.T, kube *kubefake.Clientset, egress *egressfake.Clientset) (*Watchers, context.Context) {
	t.Helper()
	w, err := New(kube, egress, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := w.Start(ctx, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	return w, ctx
}
