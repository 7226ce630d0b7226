package watchers

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// Annotations egressd reads; every other annotation is dropped from the cache.
var keptAnnotations = map[string]bool{
	"k8s.ovn.org/host-cidrs":                     true, // EgressFirewall nodeSelector, EgressIP
	"k8s.ovn.org/node-primary-ifaddr":            true, // EgressIP bare-metal config
	"cloud.network.openshift.io/egress-ipconfig": true, // EgressIP cloud capacity
	"k8s.ovn.org/acl-logging":                    true, // EgressFirewall logging
	"k8s.v1.cni.cncf.io/network-status":          true, // external-route dynamic hops
	"k8s.ovn.org/egressip-mark":                  true, // EgressIP mark
	"k8s.ovn.org/egressip-owner-ref":             true, // CloudPrivateIPConfig owner
	"k8s.ovn.org/routing-external-gws":           true, // legacy external gateways (namespace)
	"k8s.ovn.org/routing-namespaces":             true, // legacy gateway pod
	"k8s.ovn.org/routing-network":                true, // legacy gateway pod's network
	"k8s.ovn.org/bfd-enabled":                    true, // legacy BFD (namespace, pod)
	"egressd.io/egress-router-spec":              true, // the spec a router pod was made for
}

// trimMeta drops what no egressd feature reads: managed fields, owner references, finalizers,
// and annotations outside keptAnnotations. It keeps name, namespace, uid, labels, deletion
// timestamp and resource version (which informers need).
func trimMeta(m *metav1.ObjectMeta) {
	m.ManagedFields = nil
	m.OwnerReferences = nil
	m.Finalizers = nil
	m.GenerateName = ""
	var kept map[string]string
	for k, v := range m.Annotations {
		if keptAnnotations[k] {
			if kept == nil {
				kept = map[string]string{}
			}
			kept[k] = v
		}
	}
	m.Annotations = kept
}

// transform shrinks core objects before they enter the informer caches, so that memory per
// object stays small and flat with cluster size: a pod becomes a Pod. CRD objects only lose
// managed fields: egressd reads all of their spec and status. A Pod passes unchanged: the
// reflector's watch-list transforms what it streams, and the informer's queue again.
func transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return trimPod(o), nil
	case *Pod:
		return o, nil
	case *corev1.Node:
		return trimNode(o), nil
	case *corev1.Namespace:
		trimMeta(&o.ObjectMeta)
		o.Spec = corev1.NamespaceSpec{}
		o.Status = corev1.NamespaceStatus{Phase: o.Status.Phase}
	case *corev1.Service:
		trimMeta(&o.ObjectMeta)
		o.Spec = corev1.ServiceSpec{
			Type:                  o.Spec.Type,
			ClusterIPs:            o.Spec.ClusterIPs,
			ExternalIPs:           o.Spec.ExternalIPs,
			Ports:                 o.Spec.Ports,
			ExternalTrafficPolicy: o.Spec.ExternalTrafficPolicy,
		}
		o.Status = corev1.ServiceStatus{LoadBalancer: o.Status.LoadBalancer}
	case *discoveryv1.EndpointSlice:
		trimMeta(&o.ObjectMeta)
		for i := range o.Endpoints {
			o.Endpoints[i].Hostname = nil
			o.Endpoints[i].TargetRef = nil
			o.Endpoints[i].DeprecatedTopology = nil
			o.Endpoints[i].Hints = nil
			o.Endpoints[i].Zone = nil
		}
		for i := range o.Ports { // protocol and port: EgressFirewall judges external backends
			o.Ports[i].Name, o.Ports[i].AppProtocol = nil, nil
		}
	case *ovnv1.EgressFirewall:
		o.ManagedFields = nil
		o.Spec.Egress = exactly(o.Spec.Egress)
		internRules(o.Spec.Egress)
		internStatus(&o.Status)
	case *ovnv1.EgressQoS:
		o.ManagedFields = nil
		o.Spec.Egress = exactly(o.Spec.Egress)
	case metav1.ObjectMetaAccessor:
		o.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

// sameRules is transform, then an EgressFirewall of the generation its cached version has
// takes that version's rules instead of its own copy. Every status write (the controller's,
// or another writer's) brings the firewall again, and whatever still holds the version
// before (the compile keeps the last valid one, to enforce while a later one fails) would keep
// a second copy of its rules alive: 9 MB of 10,000 firewalls' on each agent. The generation
// moves with every change of the spec.
func sameRules(cached cache.Store, transform cache.TransformFunc) cache.TransformFunc {
	return func(obj any) (any, error) {
		obj, err := transform(obj)
		ef, ok := obj.(*ovnv1.EgressFirewall)
		if err != nil || !ok {
			return obj, err
		}
		if o, ok, _ := cached.Get(ef); ok {
			if old := o.(*ovnv1.EgressFirewall); old != ef && old.UID == ef.UID && old.Generation == ef.Generation && ef.Generation != 0 {
				ef.Spec.Egress = old.Spec.Egress
			}
		}
		return ef, nil
	}
}

// exactly is s in an array of its length. The JSON decoder grows a list as it reads it, which
// leaves up to half of its array unused: 10,000 EgressFirewalls of 10 rules each held 5 MB of
// rules nobody wrote (a 16-rule array each).
func exactly[S ~[]E, E any](s S) S {
	if cap(s) == len(s) {
		return s
	}
	out := make(S, len(s))
	copy(out, s)
	return out
}

// egressTransform is transform, then trim (if any) for the egress API objects.
func egressTransform(trim func(obj any)) cache.TransformFunc {
	if trim == nil {
		return transform
	}
	return func(obj any) (any, error) {
		obj, err := transform(obj)
		if err == nil {
			trim(obj)
		}
		return obj, err
	}
}

// trimPod is p as cached: what the features read, labels, node, host networking, IPs, phase
// and readiness, and the controlling EgressRouter of router pods. A cached pod is a few hundred
// bytes instead of several kilobytes, and shares its labels, namespace, node and readiness with
// the pods that hold equal ones (an egress node caches the tens of thousands its EgressIPs
// serve). Trims p's metadata in place.
func trimPod(p *corev1.Pod) *Pod {
	owner := metav1.GetControllerOf(p)
	trimMeta(&p.ObjectMeta)
	if owner != nil && owner.Kind == "EgressRouter" { // router pods: the leader places them per owner
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	p.Namespace = intern(p.Namespace)
	p.Labels = internLabels(p.Labels)
	ready := corev1.ConditionFalse
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = c.Status
		}
	}
	podIP := p.Status.PodIP
	if len(p.Status.PodIPs) > 0 && p.Status.PodIPs[0].IP == podIP {
		podIP = p.Status.PodIPs[0].IP // one copy of the address, not two
	}
	return &Pod{
		ObjectMeta: p.ObjectMeta,
		Spec:       PodSpec{NodeName: intern(p.Spec.NodeName), HostNetwork: p.Spec.HostNetwork},
		Status: PodStatus{
			Phase:      corev1.PodPhase(intern(string(p.Status.Phase))),
			PodIPs:     exactly(p.Status.PodIPs),
			PodIP:      podIP,
			Conditions: podReadiness(ready),
		},
	}
}

// Readiness conditions as cached: one array for each status, shared by every object with it.
var (
	podReady  = map[corev1.ConditionStatus][]corev1.PodCondition{}
	nodeReady = map[corev1.ConditionStatus][]corev1.NodeCondition{}
)

func init() {
	for _, s := range []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown} {
		podReady[s] = []corev1.PodCondition{{Type: corev1.PodReady, Status: s}}
		nodeReady[s] = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s}}
	}
}

func podReadiness(s corev1.ConditionStatus) []corev1.PodCondition {
	if c, ok := podReady[s]; ok {
		return c
	}
	return []corev1.PodCondition{{Type: corev1.PodReady, Status: s}}
}

func nodeReadiness(s corev1.ConditionStatus) []corev1.NodeCondition {
	if c, ok := nodeReady[s]; ok {
		return c
	}
	return []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s}}
}

// internStatus shares the status strings every EgressFirewall repeats: the aggregate and the
// nodes' entries ("node: EgressFirewall Rules applied").
func internStatus(st *ovnv1.EgressFirewallStatus) {
	st.Status = intern(st.Status)
	for i, m := range st.Messages {
		st.Messages[i] = intern(m)
	}
}

// internRules shares what EgressFirewall rules repeat across namespaces: their types,
// protocols, destinations and node selectors.
func internRules(rules []ovnv1.EgressFirewallRule) {
	for i := range rules {
		r := &rules[i]
		r.Type = ovnv1.EgressFirewallRuleType(intern(string(r.Type)))
		for j := range r.Ports {
			r.Ports[j].Protocol = intern(r.Ports[j].Protocol)
		}
		r.To.CIDRSelector = intern(r.To.CIDRSelector)
		r.To.DNSName = intern(r.To.DNSName)
		r.To.NodeSelector = internSelector(r.To.NodeSelector)
	}
}

func trimNode(n *corev1.Node) *corev1.Node {
	trimMeta(&n.ObjectMeta)
	ready := corev1.ConditionUnknown
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status
		}
	}
	n.Spec = corev1.NodeSpec{PodCIDRs: n.Spec.PodCIDRs, PodCIDR: n.Spec.PodCIDR}
	n.Status = corev1.NodeStatus{
		Addresses:  n.Status.Addresses,
		Conditions: nodeReadiness(ready),
	}
	return n
}
