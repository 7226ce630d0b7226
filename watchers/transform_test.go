package watchers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

func TestTransformPodKeepsWhatFeaturesRead(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "ns", Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{
				"k8s.v1.cni.cncf.io/network-status":                `[{"name":"foo"}]`,
				"kubectl.kubernetes.io/last-applied-configuration": "{...big...}",
			},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			OwnerReferences: []metav1.OwnerReference{{Name: "rs"}},
		},
		Spec: corev1.PodSpec{
			NodeName: "node-a", HostNetwork: true,
			Containers: []corev1.Container{{Name: "c", Image: "img", Env: []corev1.EnvVar{{Name: "A", Value: "B"}}}},
		},
		Status: corev1.PodStatus{
			Phase:  corev1.PodRunning,
			PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00::5"}},
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, Message: "long text"},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c"}},
		},
	}
	out, _ := transform(pod)
	p := out.(*Pod) // without the spec and status fields no feature reads
	if p.ManagedFields != nil || p.OwnerReferences != nil {
		t.Errorf("unread fields kept: %+v", p)
	}
	if again, _ := transform(p); again != p { // the informer's queue transforms a watch-list's pods again
		t.Errorf("a cached pod transformed again: %+v", again)
	}
	if len(p.Annotations) != 1 || p.Annotations["k8s.v1.cni.cncf.io/network-status"] == "" {
		t.Errorf("annotations = %v", p.Annotations)
	}
	if p.Labels["app"] != "web" || p.Spec.NodeName != "node-a" || !p.Spec.HostNetwork || len(p.Status.PodIPs) != 2 || p.Status.Phase != corev1.PodRunning {
		t.Errorf("read fields lost: %+v", p)
	}
	if len(p.Status.Conditions) != 1 || p.Status.Conditions[0].Type != corev1.PodReady || p.Status.Conditions[0].Status != corev1.ConditionTrue || p.Status.Conditions[0].Message != "" {
		t.Errorf("readiness = %+v", p.Status.Conditions)
	}
	// Readiness is read, not assumed: a pod not ready, or not reporting, is not ready.
	for _, conds := range [][]corev1.PodCondition{{{Type: corev1.PodReady, Status: corev1.ConditionFalse}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}, nil} {
		out, _ := transform(&corev1.Pod{Status: corev1.PodStatus{Conditions: conds}})
		if got := out.(*Pod).Status.Conditions; len(got) != 1 || got[0].Type != corev1.PodReady || got[0].Status != corev1.ConditionFalse {
			t.Errorf("conditions %+v -> readiness %+v, want Ready False", conds, got)
		}
	}
}

func TestTransformNodeKeepsAddressesAndReadiness(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{"k8s.ovn.org/host-cidrs": `["192.0.2.5/24"]`, "other": "x"}},
		Spec:       corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}, ProviderID: "x"},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.5"}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure}, {Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Images:     []corev1.ContainerImage{{Names: []string{"big"}}},
		},
	}
	out, _ := transform(n)
	got := out.(*corev1.Node)
	if got.Status.Images != nil || got.Spec.ProviderID != "" || len(got.Annotations) != 1 {
		t.Errorf("unread fields kept: %+v", got)
	}
	if got.Annotations["k8s.ovn.org/host-cidrs"] != `["192.0.2.5/24"]` {
		t.Errorf("annotations = %v, want k8s.ovn.org/host-cidrs kept", got.Annotations)
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != corev1.NodeReady || got.Status.Conditions[0].Status != corev1.ConditionTrue || got.Status.Addresses[0].Address != "192.0.2.5" || got.Spec.PodCIDRs[0] != "10.244.1.0/24" {
		t.Errorf("read fields lost: %+v", got)
	}
}

func TestTransformNodeReadinessIsRead(t *testing.T) {
	for _, c := range []struct {
		conds []corev1.NodeCondition
		want  corev1.ConditionStatus
	}{
		{[]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}, {Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue}}, corev1.ConditionFalse},
		{nil, corev1.ConditionUnknown},
	} {
		out, _ := transform(&corev1.Node{Status: corev1.NodeStatus{Conditions: c.conds}})
		if got := out.(*corev1.Node).Status.Conditions; len(got) != 1 || got[0].Type != corev1.NodeReady || got[0].Status != c.want {
			t.Errorf("conditions %+v -> %+v, want Ready %s", c.conds, got, c.want)
		}
	}
}

// A Service keeps what the features read: its type, cluster IPs (headless or not), external
// IPs and ports (its frontends, nodeagent/cluster.Frontends), external traffic policy and
// load-balancer ingress (EgressService, the frontends).
func TestTransformServiceKeepsWhatFeaturesRead(t *testing.T) {
	vip := corev1.LoadBalancerIPModeVIP
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.1", ClusterIPs: []string{"10.96.0.1"},
			ExternalIPs: []string{"192.0.2.7"}, Ports: []corev1.ServicePort{{Port: 80}}, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Selector: map[string]string{"app": "web"}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.51.100.1", IPMode: &vip}}}},
	}
	out, _ := transform(svc.DeepCopy())
	s := out.(*corev1.Service)
	if s.ManagedFields != nil || s.Spec.Selector != nil {
		t.Errorf("unread fields kept: %+v", s)
	}
	if s.Spec.Type != svc.Spec.Type || len(s.Spec.ClusterIPs) != 1 || len(s.Spec.ExternalIPs) != 1 || len(s.Spec.Ports) != 1 ||
		s.Spec.ExternalTrafficPolicy != svc.Spec.ExternalTrafficPolicy || len(s.Status.LoadBalancer.Ingress) != 1 ||
		s.Status.LoadBalancer.Ingress[0].IPMode == nil {
		t.Errorf("read fields lost: %+v", s)
	}
}

// The rules of the egress API objects that hold many are kept in arrays of their length (the
// decoder's leave up to half unused), and their managed fields dropped.
func TestTransformEgressRulesExactly(t *testing.T) {
	rules := make([]ovnv1.EgressFirewallRule, 10, 16)
	ef := &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: ovnv1.EgressFirewallSpec{Egress: rules}}
	ef.Spec.Egress[9].Type = "Deny"
	qos := &ovnv1.EgressQoS{Spec: ovnv1.EgressQoSSpec{Egress: make([]ovnv1.EgressQoSRule, 3, 4)}}
	for _, o := range []any{ef, qos} {
		if _, err := transform(o); err != nil {
			t.Fatal(err)
		}
	}
	if len(ef.Spec.Egress) != 10 || cap(ef.Spec.Egress) != 10 || ef.Spec.Egress[9].Type != "Deny" || ef.ManagedFields != nil {
		t.Errorf("EgressFirewall: %d rules in an array of %d, last %+v, managed fields %v", len(ef.Spec.Egress), cap(ef.Spec.Egress), ef.Spec.Egress[9], ef.ManagedFields)
	}
	if len(qos.Spec.Egress) != 3 || cap(qos.Spec.Egress) != 3 {
		t.Errorf("EgressQoS: %d rules in an array of %d", len(qos.Spec.Egress), cap(qos.Spec.Egress))
	}
}
