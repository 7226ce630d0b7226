package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cloudv1 "github.com/egressd/egressd/api/cloudnetwork/v1"
	"github.com/egressd/egressd/api/generated/clientset/versioned"
	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// cncc plays OpenShift's cloud-network-config-controller in the lab: it answers egressd's
// CloudPrivateIPConfig requests with the CNCC's real conditions, reasons, messages and finalizer
// (openshift/cloud-network-config-controller, pkg/controller/cloudprivateipconfig).
type cncc struct {
	t      *testing.T
	client versioned.Interface
}

const cnccFinalizer = "cloudprivateipconfig.cloud.network.openshift.io/finalizer"

// request waits for the request of ip for EgressIP owner on any node but those in not, takes it
// in charge (the finalizer) and returns the node it names.
func (c *cncc) request(name string, owner string, ip netip.Addr, not ...string) string {
	c.t.Helper()
	var node string
	poll.Eventually(c.t, fmt.Sprintf("a CloudPrivateIPConfig %s for EgressIP %s", name, owner), 20*time.Second, func() error {
		obj, err := c.client.CloudNetworkV1().CloudPrivateIPConfigs().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := obj.Annotations["k8s.ovn.org/egressip-owner-ref"]; got != owner {
			return fmt.Errorf("owner annotation %q", got)
		}
		if obj.DeletionTimestamp != nil || obj.Spec.Node == "" || slices.Contains(not, obj.Spec.Node) {
			return fmt.Errorf("deleting %v, spec.node %q", obj.DeletionTimestamp != nil, obj.Spec.Node)
		}
		node = obj.Spec.Node
		if !slices.Contains(obj.Finalizers, cnccFinalizer) {
			obj.Finalizers = append(obj.Finalizers, cnccFinalizer)
			_, err = c.client.CloudNetworkV1().CloudPrivateIPConfigs().Update(context.Background(), obj, metav1.UpdateOptions{})
		}
		return err
	})
	return node
}

// answer writes the CNCC's status: statusNode and the Assigned condition.
func (c *cncc) answer(name, statusNode string, status metav1.ConditionStatus, reason, message string) {
	c.t.Helper()
	ctx := context.Background()
	api := c.client.CloudNetworkV1().CloudPrivateIPConfigs()
	obj, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	obj.Status.Node = statusNode
	meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{Type: string(cloudv1.Assigned), Status: status,
		Reason: reason, Message: message, ObservedGeneration: obj.Generation})
	if _, err := api.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		c.t.Fatalf("CNCC status of %s: %v", name, err)
	}
}

// release waits for egressd to delete the request, then releases the IP as the CNCC does:
// "Deleting IP address" while the cloud works, then the finalizer goes and the object with it.
func (c *cncc) release(name string) {
	c.t.Helper()
	ctx := context.Background()
	api := c.client.CloudNetworkV1().CloudPrivateIPConfigs()
	poll.Eventually(c.t, "egressd deletes CloudPrivateIPConfig "+name, 20*time.Second, func() error {
		obj, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if obj.DeletionTimestamp == nil {
			return fmt.Errorf("not deleted (spec.node %q)", obj.Spec.Node)
		}
		return nil
	})
	c.answer(name, "", metav1.ConditionUnknown, "CloudResponsePending", "Deleting IP address")
	obj, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	obj.Finalizers = slices.DeleteFunc(obj.Finalizers, func(f string) bool { return f == cnccFinalizer })
	if _, err := api.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	// Gone, or already made again by egressd (a request for a new node follows the release at
	// once, sometimes before a first look): a new object has a new UID.
	poll.Eventually(c.t, "CloudPrivateIPConfig "+name+" gone", 10*time.Second, func() error {
		now, err := api.Get(ctx, name, metav1.GetOptions{})
		if err == nil && now.UID == obj.UID || err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

// waitEvent waits for a Warning event on EgressIP name with reason and message.
func waitEvent(t *testing.T, l *lab.Lab, name, reason, message string) {
	t.Helper()
	waitEventFor(t, l.Client, "", "involvedObject.name="+name, fmt.Sprintf("event %s on EgressIP %s", reason, name), func(e corev1.Event) bool {
		return e.Reason == reason && e.Type == "Warning" && e.Message == message && e.InvolvedObject.Kind == "EgressIP"
	})
}

// neverSource checks that none of p's connections to the web host of src's family leaves with
// src during d (not before the cloud confirmed it), and that some got through.
func neverSource(t *testing.T, step string, p *lab.Pod, src netip.Addr, d time.Duration) {
	t.Helper()
	ok := 0
	var last lab.Result
	for end := time.Now().Add(d); time.Now().Before(end); {
		last = p.TCP(webAddr(src), lab.ClientOptions{Timeout: quick})
		if last.Outcome == lab.OK && last.Seen.Src == src {
			t.Fatalf("%s: the pod left with %s before the cloud confirmed it", step, src)
		}
		if last.Outcome == lab.OK {
			ok++
		}
	}
	if ok == 0 {
		t.Fatalf("%s: no connection got through in %v (last: %s)", step, d, last)
	}
}

// TestPrivilegedEgressIPCloud: in cloud mode the leader asks the cloud for each egress IP through
// a CloudPrivateIPConfig (the test plays the CNCC) and the IP is used only once the cloud
// confirms it: pending -> success, an error reported on the EgressIP, a move when the egress
// node fails (status first, then the request's spec), a failed request on a deleted node
// deleted and made again, and everything released when the EgressIP goes. IPv4 and IPv6 (the
// dotted IPv6 name the API server validates).
func TestPrivilegedEgressIPCloud(t *testing.T) {
	privileged.Require(t)
	ctx := context.Background()
	e := newEIPLab(t, 4, "--egressip-cloud=true")
	c := &cncc{t: t, client: versioned.NewForConfigOrDie(e.CP.Config)}
	// The CNCC's node annotation: the lab's fabric is the cloud subnet, one IP per family.
	for _, n := range e.Nodes[1:] {
		ann := `[{"interface":"eni-` + n.Name + `","ifaddr":{"ipv4":"172.18.0.0/24","ipv6":"fc00:f853:ccd:e793::/64"},"capacity":{"ipv4":1,"ipv6":1}}]`
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"cloud.network.openshift.io/egress-ipconfig":%q}}}`, ann)
		if _, err := e.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := addPod(t, e.Nodes[0], e.ns, "cloudy", lab.PodOptions{Labels: map[string]string{"app": "eip"}})
	v4, v6 := netip.MustParseAddr(eip4), netip.MustParseAddr(eip6)
	const name4, name6 = "172.18.0.200", "fc00.f853.0ccd.e793.0000.0000.0000.0200"
	name := e.egressIP(t, "cloud", "eip", v4, v6)

	// Requested, pending: not published, not used.
	node4 := c.request(name4, name, v4)
	node6 := c.request(name6, name, v6)
	c.answer(name4, "", metav1.ConditionUnknown, "CloudResponsePending", "Adding IP address")
	c.answer(name6, "", metav1.ConditionUnknown, "CloudResponsePending", "Adding IP address")
	neverSource(t, "pending", pod, v4, 2*time.Second)
	if got := egressIPItemsTB(e.Lab, name); len(got) != 0 {
		t.Fatalf("status.items %v while the cloud has confirmed nothing", got)
	}

	// The cloud confirms the IPv4 address: published, used; the IPv6 one fails: reported.
	c.answer(name4, node4, metav1.ConditionTrue, "CloudResponseSuccess", "IP address successfully added")
	e.waitPlaced(t, name, 20*time.Second, map[*lab.Node]netip.Addr{e.node(node4): v4})
	eventuallySource(t, "confirmed", pod, webAddr(v4), v4)
	const quota = "Error processing cloud assignment request, err: PrivateIpAddressLimitExceeded"
	c.answer(name6, node6, metav1.ConditionFalse, "CloudResponseError", quota)
	waitEvent(t, e.Lab, name, "CloudAssignmentFailed", fmt.Sprintf("egress IP: %s for object EgressIP: %s was not assigned to node %s by the cloud: %s", v6, name, node6, quota))
	neverSource(t, "failed in the cloud", pod, v6, time.Second)

	// The IPv4 egress node fails: the status drops the item before the request moves.
	failed := e.node(node4)
	start := time.Now()
	if err := failed.SetReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	moved := c.request(name4, name, v4, node4, node6)
	requested := time.Since(start)
	if got := egressIPItemsTB(e.Lab, name); len(got) != 0 {
		t.Fatalf("the request moved to %s while status.items still say %v", moved, got)
	}
	c.answer(name4, node4, metav1.ConditionUnknown, "CloudResponsePending", "Moving IP address")
	cloudDone := time.Now()
	c.answer(name4, moved, metav1.ConditionTrue, "CloudResponseSuccess", "IP address successfully moved")
	placed := e.waitPlaced(t, name, 20*time.Second, map[*lab.Node]netip.Addr{e.node(moved): v4})
	eventuallySource(t, "moved", pod, webAddr(v4), v4)
	t.Logf("failover in cloud mode: node NotReady -> move requested %v; cloud confirmed -> status published %v (then the nodes program it as on bare metal)",
		requested.Round(time.Millisecond), placed.Sub(cloudDone).Round(time.Millisecond))
	if err := failed.SetReady(ctx, true); err != nil {
		t.Fatal(err)
	}

	// The node of the failed IPv6 request is deleted: the request is deleted and made again.
	if err := e.Client.CoreV1().Nodes().Delete(ctx, node6, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, e.Lab, name, "CloudAssignmentRetry", fmt.Sprintf("egress IP: %s previously failed on deleted node %s (reason: %s), will retry assignment", v6, node6, quota))
	c.release(name6)
	again := c.request(name6, name, v6, node6, moved)
	c.answer(name6, again, metav1.ConditionTrue, "CloudResponseSuccess", "IP address successfully added")
	e.waitPlaced(t, name, 20*time.Second, map[*lab.Node]netip.Addr{e.node(moved): v4, e.node(again): v6})
	eventuallySource(t, "IPv6 confirmed after the retry", pod, webAddr(v6), v6)

	// The EgressIP goes: both IPs are released.
	if err := e.Kube.Delete(ctx, "k8s.ovn.org/v1", "EgressIP", "", name); err != nil {
		t.Fatal(err)
	}
	c.release(name4)
	c.release(name6)
	poll.Eventually(t, "the pod leaves with its node's address again", 10*time.Second, func() error {
		if r := pod.TCP(webAddr(v4), lab.ClientOptions{Timeout: quick}); r.Outcome != lab.OK || r.Seen.Src != e.Nodes[0].IPv4 {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
}
