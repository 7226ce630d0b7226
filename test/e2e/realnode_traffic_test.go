package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/node"
	"github.com/egressd/egressd/test/poll"
)

// startStream creates the tenant's pod that streams to both external hosts, and waits until it
// runs.
func startStream(ctx context.Context, t *testing.T, l *lab.Lab, n *node.Node) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stream", Namespace: tenant},
		Spec: corev1.PodSpec{
			NodeName: n.Name,
			Containers: []corev1.Container{{Name: "labpod", Image: node.PodRef, ImagePullPolicy: corev1.PullNever,
				Args: []string{"-every", streamEvery.String(), "-for", streamFor.String(),
					net.JoinHostPort(allowedIP, strconv.Itoa(streamPort)), net.JoinHostPort(deniedIP, strconv.Itoa(streamPort))}}},
			AutomountServiceAccountToken: new(bool),
		},
	}
	// The namespace's default ServiceAccount comes from a controller, a moment after it.
	err := poll.Until(ctx, "pod "+tenant+"/stream created", 30*time.Second, func() error {
		_, err := l.Client.CoreV1().Pods(tenant).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var running *corev1.Pod
	err = poll.Until(ctx, "pod "+tenant+"/stream running", 2*time.Minute, func() error {
		p, err := l.Client.CoreV1().Pods(tenant).Get(ctx, "stream", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("%s %v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		running = p
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return running
}

// podHostLink is the node's interface towards the pod (ptp's host-side veth).
func podHostLink(t *testing.T, n *node.Node, ln *lab.Node, p *corev1.Pod) string {
	t.Helper()
	out, err := ln.NS.Run("ip", "-o", "route", "get", p.Status.PodIP)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(` dev (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("route to pod %s (%s) on %s: %q names no device", p.Name, p.Status.PodIP, n.Name, out)
	}
	return m[1]
}

// checkDSCP checks that the external host saw the stream, every datagram with dscp.
func checkDSCP(t *testing.T, c *lab.Capture, dscp uint8) {
	t.Helper()
	var total int
	wrong := map[uint8]int{}
	for _, p := range c.Packets() {
		if p.Proto != "udp" || p.DstPort != streamPort || !p.ForHost {
			continue
		}
		total++
		if p.DSCP != dscp {
			wrong[p.DSCP]++
		}
	}
	if total == 0 || len(wrong) > 0 {
		t.Errorf("the allowed host saw %d datagrams of the stream; with another DSCP than %d: %v", total, dscp, wrong)
	}
}

type streamCount struct{ sent, failed int }

// awaitStreamEnd waits for the stream pod's final counts, by destination address.
func awaitStreamEnd(ctx context.Context, t *testing.T, n *node.Node) map[string]streamCount {
	t.Helper()
	re := regexp.MustCompile(`(?m)^sent (\S+):\d+ (\d+) failed (\d+)$`)
	counts := map[string]streamCount{}
	err := poll.Until(ctx, "pod "+tenant+"/stream done", streamFor+time.Minute, func() error {
		out, err := n.ContainerLog(tenant, "stream", "labpod")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "\ndone\n") {
			return fmt.Errorf("log so far: %q", out)
		}
		for _, m := range re.FindAllStringSubmatch(out, -1) {
			s, _ := strconv.Atoi(m[2])
			f, _ := strconv.Atoi(m[3])
			counts[m[1]] = streamCount{s, f}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return counts
}

// counters are nftables rules' counter values.
var counters = regexp.MustCompile(`counter packets \d+ bytes \d+`)

// nodeState is what egressd may change on a node, as text: nftables, routing rules and tables,
// addresses, bpffs, tcx programs of every interface, the CNI socket directory. Routes and
// addresses of the interface skip (a pod's, which the CNI owns) are left out.
func nodeState(t *testing.T, n *node.Node, ln *lab.Node, skip string) string {
	t.Helper()
	var b strings.Builder
	for _, args := range [][]string{
		{"nft", "list", "ruleset"},
		{"ip", "-4", "rule"}, {"ip", "-6", "rule"},
		{"ip", "-4", "route", "show", "table", "all"}, {"ip", "-6", "route", "show", "table", "all"},
		{"ip", "-o", "addr"},
		{"tc", "qdisc", "show"}, // egressd's clsact qdiscs
	} {
		out, err := ln.NS.Run(args[0], args[1:]...)
		if err != nil {
			t.Fatalf("%v on %s: %v", args, n.Name, err)
		}
		fmt.Fprintf(&b, "# %s\n", strings.Join(args, " "))
		for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
			if skip != "" && regexp.MustCompile(`\b`+regexp.QuoteMeta(skip)+`\b`).MatchString(line) {
				continue
			}
			// The kubelet's iptables-nft chains count packets: their rules, not their traffic.
			b.WriteString(counters.ReplaceAllString(line, "counter") + "\n")
		}
	}
	// /run/egressd is the DaemonSet's hostPath (DirectoryOrCreate: the kubelet makes it);
	// egressctl cleanup removes it.
	for _, root := range []string{"/sys/fs/bpf", "/run/egressd"} {
		fmt.Fprintf(&b, "# find %s\n", root)
		_ = filepath.Walk(n.RootPath(root), func(p string, _ os.FileInfo, err error) error {
			if err == nil {
				rel, _ := filepath.Rel(n.RootPath("/"), p)
				b.WriteString("/" + rel + "\n")
			}
			return nil
		})
	}
	b.WriteString("# tcx\n")
	err := ln.NS.Do(func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, ifi := range ifs {
			for _, hook := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
				res, err := link.QueryPrograms(link.QueryOptions{Target: ifi.Index, Attach: hook})
				if err != nil {
					return fmt.Errorf("tcx %s of %s: %w", hook, ifi.Name, err)
				}
				if len(res.Programs) > 0 {
					fmt.Fprintf(&b, "%s %s: %d programs\n", ifi.Name, hook, len(res.Programs))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
