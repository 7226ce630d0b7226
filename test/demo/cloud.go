package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cloudv1 "github.com/egressd/egressd/api/cloudnetwork/v1"
	"github.com/egressd/egressd/api/generated/clientset/versioned"
	"github.com/egressd/egressd/test/lab"
)

// demoCloud turns the lab into a "cloud": the nodes get the cloud-network-config-controller's
// egress-ipconfig annotation, so egressd's leader stops trusting the status of demo-clients
// and asks the cloud for 172.18.0.200 through a CloudPrivateIPConfig. The demo plays the CNCC
// and confirms it; the status comes back, and node-0's client now reaches the egress node
// through egressd's VXLAN tunnel (a cloud fabric drops pod sources).
func demoCloud(ctx context.Context, l *lab.Lab, c *checker, pods []*lab.Pod) error {
	const eip = "172.18.0.200"
	for _, n := range l.Nodes {
		ann := fmt.Sprintf(`[{"interface":"eni-%s","ifaddr":{"ipv4":"172.18.0.0/24"},"capacity":{"ipv4":14}}]`, n.Name)
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"cloud.network.openshift.io/egress-ipconfig":%q}}}`, ann)
		if _, err := l.Client.CoreV1().Nodes().Patch(ctx, n.Name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	api := versioned.NewForConfigOrDie(l.CP.Config).CloudNetworkV1().CloudPrivateIPConfigs()
	var req *cloudv1.CloudPrivateIPConfig
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if r, err := api.Get(ctx, eip, metav1.GetOptions{}); err == nil && r.Spec.Node != "" {
			req = r
			break
		}
	}
	if req == nil {
		c.check("CloudPrivateIPConfig "+eip, "requested for demo-clients", "none")
		return nil
	}
	c.check("CloudPrivateIPConfig "+eip+" (the request)", "owner demo-clients, spec.node "+l.Nodes[1].Name,
		fmt.Sprintf("owner %s, spec.node %s", req.Annotations["k8s.ovn.org/egressip-owner-ref"], req.Spec.Node))
	c.check("status.items while the cloud works", "none", egressIPItems(ctx, l, "demo-clients"))

	// The CNCC's answer: attached.
	req.Status.Node = req.Spec.Node
	meta.SetStatusCondition(&req.Status.Conditions, metav1.Condition{Type: string(cloudv1.Assigned), Status: metav1.ConditionTrue,
		Reason: "CloudResponseSuccess", Message: "IP address successfully added"})
	if _, err := api.UpdateStatus(ctx, req, metav1.UpdateOptions{}); err != nil {
		return err
	}
	items := awaitItems(ctx, l, "demo-clients")
	c.check("status.items once the cloud confirmed", l.Nodes[1].Name+"="+eip, items)
	for _, p := range pods {
		r := sourceSeen(p, "192.0.2.10:443", netip.MustParseAddr(eip))
		c.check(fmt.Sprintf("%s (%s) -> 192.0.2.10:443 source", p.Name, p.Node.Name), "ok "+eip, fmt.Sprintf("%s %s", r.Outcome, r.Seen.Src))
	}
	tunnel := "absent"
	if out, err := l.Nodes[0].NS.Run("ip", "-d", "link", "show", "egressd-vxlan"); err == nil && len(out) > 0 {
		tunnel = "present"
	}
	c.check(l.Nodes[0].Name+" egressd-vxlan (steering in a cloud)", "present", tunnel)
	return nil
}
