package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/test/netns"
)

// Pod is a lab pod: a namespace whose eth0 the node's CNI chain created (libcni, as a container
// runtime), and the Pod object the lab keeps as kubelet would.
type Pod struct {
	Namespace, Name string
	Node            *Node
	NS              *netns.NS
	IPv4, IPv6      netip.Addr
	// HostLink is the node-side interface of the pod's veth.
	HostLink string
	// Sandbox is the CNI_CONTAINERID of the pod's sandbox.
	Sandbox string
	// CNIAdd is how long the chain's ADD took, and CNIPlugins how long each plugin ran in it
	// (by "<plugin> <command>", e.g. "egressd-cni ADD").
	CNIAdd     time.Duration
	CNIPlugins map[string]time.Duration
	obs        *observer
	cni        *libcni.CNIConfig
	conf       *libcni.NetworkConfigList
	rt         *libcni.RuntimeConf
}

// PodOptions of AddPod.
type PodOptions struct {
	Labels map[string]string
	// CNIFailOpen sets failOpen in egressd-cni's config for this pod's ADD (a node whose
	// agent is down still creates it).
	CNIFailOpen bool
	// CNITimeout is egressd-cni's timeout for this pod (default 10 s).
	CNITimeout time.Duration
	// WithoutEgressdCNI leaves egressd-cni out of the chain (the pod is found from the API only).
	WithoutEgressdCNI bool
	// CNIFloor puts test/cnifloor, a plugin that only returns prevResult, where egressd-cni
	// would be (the pod is found from the API only; not with Options.InstallCNI): what a
	// chained plugin adds at the least.
	CNIFloor bool

	// primaryOnly builds the list of the primary plugin alone (what a node's CNI installs).
	primaryOnly bool
	// Started, when set, runs in the pod's namespace the instant the CNI ADD returned, before
	// the Pod object's status is written (a container that sends at once).
	Started func(p *Pod)
}

// AddPod does what kubelet and a container runtime do for a pod bound to the node: the Pod
// object first, then the sandbox (a namespace) and its network from the node's CNI chain, then
// the object's status (Running, Ready, its IPs). A failed CNI ADD is cleaned up as a runtime
// does (CNI DEL, the namespace and, here, the Pod object) and returned.
func (n *Node) AddPod(ctx context.Context, namespace, name string, o PodOptions) (*Pod, error) {
	n.lab.mu.Lock()
	n.podSeq++
	k := n.podSeq
	n.lab.mu.Unlock()
	p := &Pod{Namespace: namespace, Name: name, Node: n, Sandbox: fmt.Sprintf("lab-%s-%d-%d", n.lab.ID, n.Index, k),
		CNIPlugins: map[string]time.Duration{}}
	created, err := p.create(ctx, o)
	if err != nil {
		return nil, err
	}
	if p.NS, err = n.lab.newNS(fmt.Sprintf("p%d-%d", n.Index, k)); err != nil {
		return nil, err
	}
	if err := p.addNetwork(ctx, created, o); err != nil {
		_ = p.Delete(context.Background())
		return nil, err
	}
	if o.Started != nil {
		o.Started(p)
	}
	if err := p.setStatus(ctx, created); err != nil {
		return nil, err
	}
	return p, nil
}

// addNetwork runs the node's chain for the sandbox and reads the pod's addresses and veth.
func (p *Pod) addNetwork(ctx context.Context, obj *corev1.Pod, o PodOptions) error {
	var err error
	if p.conf, err = p.Node.conflist(o); err != nil {
		return err
	}
	if p.cni, err = p.Node.cniConfig(p.CNIPlugins, o.CNIFloor); err != nil {
		return err
	}
	p.rt = &libcni.RuntimeConf{
		ContainerID: p.Sandbox, NetNS: p.NS.Path(), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.Namespace}, {"K8S_POD_NAME", p.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.Sandbox}, {"K8S_POD_UID", string(obj.UID)}},
	}
	start := time.Now()
	res, err := p.cni.AddNetworkList(ctx, p.conf, p.rt)
	p.CNIAdd = time.Since(start)
	if err != nil {
		return fmt.Errorf("CNI ADD of pod %s/%s on %s: %w", p.Namespace, p.Name, p.Node.Name, err)
	}
	r, err := current.NewResultFromResult(res)
	if err != nil {
		return err
	}
	for _, ip := range r.IPs {
		if a, ok := netip.AddrFromSlice(ip.Address.IP); ok {
			if a = a.Unmap(); a.Is4() {
				p.IPv4 = a
			} else {
				p.IPv6 = a
			}
		}
	}
	for _, i := range r.Interfaces {
		if i.Sandbox == "" && i.Name != "cni0" {
			p.HostLink = i.Name
		}
	}
	if !p.IPv4.IsValid() || !p.IPv6.IsValid() || p.HostLink == "" {
		return fmt.Errorf("CNI ADD of pod %s/%s: result without both addresses or a host interface: %s", p.Namespace, p.Name, r)
	}
	return nil
}

// create creates the Pod object, bound to the node, without status.
func (p *Pod) create(ctx context.Context, o PodOptions) (*corev1.Pod, error) {
	c := p.Node.lab.Client.CoreV1().Pods(p.Namespace)
	obj := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: o.Labels,
			Annotations: map[string]string{labPodAnnotation: "true"}},
		Spec: corev1.PodSpec{
			NodeName:   p.Node.Name,
			Containers: []corev1.Container{{Name: "app", Image: "lab.invalid/pod"}},
		},
	}
	created, err := c.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create Pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	// Gone with the lab, at once: the next lab reuses node names and pod addresses, and must not
	// meet pods of this one waiting for their namespace's deletion.
	p.Node.lab.onClose(func() {
		zero := int64(0)
		_ = c.Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &created.UID}})
	})
	return created, nil
}

// setStatus writes what kubelet reports of a started pod.
func (p *Pod) setStatus(ctx context.Context, created *corev1.Pod) error {
	created.Status = p.status()
	_, err := p.Node.lab.Client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

// status is what kubelet reports of the started pod: Running, Ready, its IPs.
func (p *Pod) status() corev1.PodStatus {
	now := metav1.Now()
	return corev1.PodStatus{
		Phase:  corev1.PodRunning,
		HostIP: p.Node.IPv4.String(),
		PodIP:  p.IPv4.String(),
		PodIPs: []corev1.PodIP{{IP: p.IPv4.String()}, {IP: p.IPv6.String()}},
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
		StartTime: &now,
	}
}

// CheckNetwork runs the chain's CNI CHECK for the pod's sandbox, as a runtime does.
func (p *Pod) CheckNetwork(ctx context.Context) error {
	return p.cni.CheckNetworkList(ctx, p.conf, p.rt)
}

// Delete tears the pod down as kubelet and the runtime do: CNI DEL of its sandbox, the Pod
// object, its namespace (and so its veth).
func (p *Pod) Delete(ctx context.Context) error {
	var errs []error
	if p.cni != nil {
		if err := p.cni.DelNetworkList(ctx, p.conf, p.rt); err != nil {
			errs = append(errs, fmt.Errorf("CNI DEL: %w", err))
		}
	}
	zero := int64(0)
	err := p.Node.lab.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if p.obs != nil {
		p.obs.close()
	}
	if p.NS != nil {
		errs = append(errs, p.NS.Delete())
	}
	return errors.Join(append(errs, err)...)
}
