package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedExternalRouteIPv6Dynamic: a policy with an IPv6 static hop and a dynamic hop (a
// gateway pod whose k8s.v1.cni.cncf.io/network-status names its IPv4 and IPv6 addresses on the
// attachment) spreads a dual-stack pod's IPv6 flows over both gateways with its pod IPv6, and
// its IPv4 flows through the one gateway of that family; an outside client's IPv6 connections
// through the gateways get their replies through the gateway each came through; the gateway pod
// no longer selected takes its hop away.
func TestPrivilegedExternalRouteIPv6Dynamic(t *testing.T) {
	privileged.Require(t)
	ctx := context.Background()
	l := lab.New(t, lab.Options{Nodes: 1, Agents: true})
	_, gws := gatewaysTo(t, l, true)
	mac1, mac2 := linkMAC(t, gws[0]), linkMAC(t, gws[1])

	// The gateway pod: its attachment "foo" holds gw2's addresses (as Multus reports them).
	gwNS, ns := l.CP.Namespace(t), l.CP.Namespace(t)
	addPod(t, l.Nodes[0], gwNS, "gateway", lab.PodOptions{Labels: map[string]string{"app": "gw"}})
	status := fmt.Sprintf(`{"metadata":{"annotations":{"k8s.v1.cni.cncf.io/network-status":"[{\"name\":\"foo\",\"interface\":\"net1\",\"ips\":[\"%s\",\"%s\"]}]"}}}`,
		gws[1].Fabric, gws[1].Fabric6)
	if _, err := l.Client.CoreV1().Pods(gwNS).Patch(ctx, "gateway", types.MergePatchType, []byte(status), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := addPod(t, l.Nodes[0], ns, "server", lab.PodOptions{})
	if err := pod.Serve(8080); err != nil {
		t.Fatal(err)
	}
	client := clientBehindGateways(t, l, gws, true)
	gatewayPolicy(t, l, ns, fmt.Sprintf(`    static:
    - {ip: %q}
    dynamic:
    - podSelector: {matchLabels: {app: gw}}
      namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
      networkAttachmentName: foo
`, gws[0].Fabric6, gwNS))

	const v6, v4 = "[2001:db8::50]:80", "192.0.2.50:80"
	poll.Eventually(t, "IPv6 flows over both gateways with the pod IPv6, IPv4 flows through gw2", 15*time.Second, func() error {
		macs, sources := gatewaysSeen(t, pod, v6, 24)
		if macs[mac1] == 0 || macs[mac2] == 0 || sources[pod.IPv6.String()] != macs[mac1]+macs[mac2] {
			return fmt.Errorf("IPv6: gateways %v (gw1 %s, gw2 %s), sources %v", macs, mac1, mac2, sources)
		}
		macs, sources = gatewaysSeen(t, pod, v4, 8)
		if macs[mac2] != 8 || sources[pod.IPv4.String()] != 8 {
			return fmt.Errorf("IPv4: gateways %v (gw2 %s), sources %v", macs, mac2, sources)
		}
		return nil
	})

	// An outside client's IPv6 connections through both gateways return through the gateway
	// each came through.
	poll.Eventually(t, "every IPv6 reply back through the gateway its request came through", 15*time.Second, func() error {
		used := map[string]int{}
		for _, rt := range roundTrips(t, client, netip.AddrPortFrom(pod.IPv6, 8080), gws, 12) {
			if rt.request == "" || rt.reply != rt.request {
				return fmt.Errorf("%s", rt)
			}
			used[rt.request]++
		}
		if used["gw1"] == 0 || used["gw2"] == 0 {
			return fmt.Errorf("the client's connections came through %v only", used)
		}
		return nil
	})

	// The gateway pod loses its label: its hop goes; IPv6 leaves through gw1 alone.
	if _, err := l.Client.CoreV1().Pods(gwNS).Patch(ctx, "gateway", types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"other"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "IPv6 flows all through gw1", 10*time.Second, func() error {
		if macs, _ := gatewaysSeen(t, pod, v6, 16); macs[mac1] != 16 {
			return fmt.Errorf("of 16 flows: %v (gw1 %s)", macs, mac1)
		}
		return nil
	})
}
