package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// BenchmarkPrivilegedThroughput floods UDP (64-byte datagrams, 3 s per run) from a pod through
// its lab node to an external sink and reports the rate that arrives, in one run: without
// egressd, with egressd enforcing an 8000-rule EgressFirewall whose last rule allows the flow,
// and with the same 8000 rules as a linear nftables chain instead. Run with: make bench-firewall.
func BenchmarkPrivilegedThroughput(b *testing.B) {
	privileged.Require(b)
	l := lab.New(b, lab.Options{Nodes: 1})
	ctx := context.Background()
	sink, err := l.AddExternal("sink", lab.ExternalOptions{}, "203.0.113.10")
	if err != nil {
		b.Fatal(err)
	}
	count, err := sink.CountUDP(9000)
	if err != nil {
		b.Fatal(err)
	}
	ns := l.CP.Namespace(b)
	p := addPod(b, l.Nodes[0], ns, "p", lab.PodOptions{})
	const d = 3 * time.Second
	rate := func(name string) float64 {
		before := count()
		sent, err := p.FloodUDP("203.0.113.10:9000", d)
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the last packets drain
		got := count() - before
		r := float64(got) / d.Seconds()
		b.Logf("%-22s sent %8d, received %8d: %.0f packets/s", name, sent, got, r)
		return r
	}
	rate("warm-up")
	base := rate("no egressd")

	// egressd with 8000 rules; the flow matches the last one (Allow).
	node := l.Nodes[0]
	if err := l.StartAgents(ctx); err != nil {
		b.Fatal(err)
	}
	doc := firewallYAML(8000, "{type: Allow, to: {cidrSelector: 203.0.113.0/24}}")
	if err := l.Kube.Apply(ctx, ns, doc); err != nil {
		b.Fatal(err)
	}
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default", "status.status", fwApplied, 30*time.Second); err != nil {
		b.Fatal(err)
	}
	withEgressd := rate("egressd, 8000 rules")

	// The same rules as a linear nft chain on the node, egressd stopped and cleaned up.
	if _, err := node.Agent.Terminate(5 * time.Second); err != nil {
		b.Fatal(err)
	}
	if _, err := node.NS.Run(egressctl(b), "cleanup", "--bpf-pin-root", lab.PinRoot(l.ID, node.Name)); err != nil {
		b.Fatal(err)
	}
	var chain strings.Builder
	chain.WriteString("table inet benchlinear {\n chain forward {\n  type filter hook forward priority 0; policy accept;\n")
	for i := range 7999 {
		fmt.Fprintf(&chain, "  ip saddr %s ip daddr 10.%d.%d.0/24 accept\n", p.IPv4, 100+i/250, i%250)
	}
	fmt.Fprintf(&chain, "  ip saddr %s ip daddr 203.0.113.0/24 accept\n }\n}\n", p.IPv4)
	cmd := node.NS.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(chain.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("nft: %v: %s", err, out)
	}
	linear := rate("linear nft, 8000 rules")
	_, _ = node.NS.Run("nft", "delete", "table", "inet", "benchlinear")

	b.ReportMetric(base, "pps-no-egressd")
	b.ReportMetric(withEgressd, "pps-egressd-8000-rules")
	b.ReportMetric(linear, "pps-linear-nft-8000-rules")
	b.ReportMetric(withEgressd/base, "ratio-egressd")
	b.ReportMetric(linear/base, "ratio-linear-nft")
}
