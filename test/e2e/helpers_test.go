package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/egressd/egressd/test/agent"
	"github.com/egressd/egressd/test/kube"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
)

func unstructuredStrings(obj map[string]any, path ...string) ([]string, bool, error) {
	return unstructured.NestedStringSlice(obj, path...)
}

func unstructuredSlice(obj map[string]any, path ...string) ([]any, bool, error) {
	return unstructured.NestedSlice(obj, path...)
}

// egressctl builds cmd/egressctl once per test binary.
func egressctl(t testing.TB) string {
	t.Helper()
	bin, err := agent.Command("egressctl")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// apply creates or updates the objects of a YAML document in ns, as kubectl apply would.
func apply(t testing.TB, l *lab.Lab, ns, doc string) {
	t.Helper()
	if err := l.Kube.Apply(context.Background(), ns, doc); err != nil {
		t.Fatal(err)
	}
}

// applyAndWait applies a one-object YAML document and waits until the object's status.status
// reads want (fwApplied, qosApplied: every node reported it applied). Made for a new object:
// an updated one may still show the status of its previous spec, so wait for the behaviour
// the update changes instead.
func applyAndWait(t *testing.T, l *lab.Lab, ns, doc, want string) {
	t.Helper()
	apply(t, l, ns, doc)
	objs, err := kube.Decode(doc)
	if err != nil || len(objs) != 1 {
		t.Fatalf("applyAndWait takes one object: %d (%v)", len(objs), err)
	}
	o := objs[0]
	if err := l.Kube.WaitField(context.Background(), o.GetAPIVersion(), o.GetKind(), ns, o.GetName(), "status.status", want, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// applyFirewall applies an EgressFirewall and waits until every node reports it applied.
func applyFirewall(t *testing.T, l *lab.Lab, ns, doc string) {
	t.Helper()
	applyAndWait(t, l, ns, doc, fwApplied)
}

// addExternals adds external hosts, each given as name and addresses.
func addExternals(t *testing.T, l *lab.Lab, hosts ...[]string) {
	t.Helper()
	for _, h := range hosts {
		if _, err := l.AddExternal(h[0], lab.ExternalOptions{}, h[1:]...); err != nil {
			t.Fatal(err)
		}
	}
}

// addPod adds a pod to a lab node.
func addPod(t testing.TB, n *lab.Node, ns, name string, o lab.PodOptions) *lab.Pod {
	t.Helper()
	p, err := n.AddPod(context.Background(), ns, name, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// backendPort is a Service port and the port its backends serve it on.
type backendPort struct {
	name         string
	proto        corev1.Protocol
	port, target int32
}

// selectorlessService creates a dual-stack Service without selector whose EndpointSlices,
// written by hand as for backends outside the cluster, list the addresses v4 and v6 on the
// ports' targets; it returns the Service's IPv4 and IPv6 cluster IPs. Tests DNAT them as
// kube-proxy would (the lab runs none).
func selectorlessService(t *testing.T, l *lab.Lab, ns, name string, ports []backendPort, v4, v6 []string) (string, string) {
	t.Helper()
	ctx := context.Background()
	kc := l.CP.Client(t)
	spec := corev1.ServiceSpec{
		IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
		IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
	}
	var epPorts []discoveryv1.EndpointPort
	for _, p := range ports {
		spec.Ports = append(spec.Ports, corev1.ServicePort{Name: p.name, Port: p.port, Protocol: p.proto})
		epPorts = append(epPorts, discoveryv1.EndpointPort{Name: ptr.To(p.name), Port: ptr.To(p.target), Protocol: ptr.To(p.proto)})
	}
	svc, err := kc.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for family, addrs := range map[discoveryv1.AddressType][]string{discoveryv1.AddressTypeIPv4: v4, discoveryv1.AddressTypeIPv6: v6} {
		var eps []discoveryv1.Endpoint
		for _, a := range addrs {
			eps = append(eps, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		slice := name + "-4"
		if family == discoveryv1.AddressTypeIPv6 {
			slice = name + "-6"
		}
		if _, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: slice, Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "egressd-e2e"}},
			AddressType: family, Endpoints: eps, Ports: epPorts,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return svc.Spec.ClusterIPs[0], svc.Spec.ClusterIPs[1]
}

// sample reads a series of the node's agent's metrics; absent is 0.
func sample(t testing.TB, n *lab.Node, series string) float64 {
	t.Helper()
	return sampleOf(t, n.Agent, series)
}

// sampleOf reads a series of p's metrics (an agent's or a controller's); absent is 0.
func sampleOf(t testing.TB, p *agent.Process, series string) float64 {
	t.Helper()
	v, err := p.Sample(series)
	if err != nil {
		t.Fatal(err)
	}
	if v == "" {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s = %q: %v", series, v, err)
	}
	return f
}

// waitEventFor waits for an event in ns (every namespace when "") that fieldSelector selects
// and match accepts. Recorders post events in the background, so an event may land after the
// status a test waited for.
func waitEventFor(t testing.TB, c kubernetes.Interface, ns, fieldSelector, what string, match func(corev1.Event) bool) {
	t.Helper()
	poll.Eventually(t, what, 20*time.Second, func() error {
		evs, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: fieldSelector})
		if err != nil {
			return err
		}
		var got []string
		for _, e := range evs.Items {
			if match(e) {
				return nil
			}
			got = append(got, e.Type+" "+e.Reason+": "+e.Message)
		}
		return fmt.Errorf("events %q", got)
	})
}
