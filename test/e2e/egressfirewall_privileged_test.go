package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

const (
	fwApplied    = "EgressFirewall Rules applied"
	fwNotApplied = "EgressFirewall Rules not correctly applied"
	quick        = time.Second // a dropped SYN shows as a timeout within this
)

type reach struct {
	from *lab.Pod
	dst  string
	udp  bool
	want lab.Outcome
}

// check tries the connection once: nil if its outcome is the one wanted.
func (c reach) check() error {
	var r lab.Result
	if c.udp {
		r = c.from.UDP(c.dst, lab.ClientOptions{Timeout: quick})
	} else {
		r = c.from.TCP(c.dst, lab.ClientOptions{Timeout: quick})
	}
	if r.Outcome != c.want {
		return fmt.Errorf("%s: %s, want %s", c, r, c.want)
	}
	return nil
}

func (c reach) String() string {
	proto := "tcp"
	if c.udp {
		proto = "udp"
	}
	return fmt.Sprintf("%s/%s (%s CNI) -> %s %s", c.from.Namespace, c.from.Name, c.from.Node.CNI, c.dst, proto)
}

// checkReach checks each case once; a connection that should succeed gets two more tries, each
// after a failed one: on a busy machine (make test runs two packages at once, race-built agents)
// a handshake within the short timeout is not certain, while a drop is what must never pass.
func checkReach(t *testing.T, step string, cases []reach) {
	t.Helper()
	for _, c := range cases {
		err := c.check()
		for try := 1; err != nil && c.want == lab.OK && try < 3; try++ {
			err = c.check()
		}
		if err != nil {
			t.Errorf("%s: %v", step, err)
		}
	}
}

// TestPrivilegedEgressFirewall: allow/deny by CIDR and CIDR+port, IPv4 and IPv6, on both CNI
// shapes; pod-to-pod and replies to inbound connections untouched under deny-all; status per
// node and aggregate; an update; an invalid update that keeps the old rules; a delete.
func TestPrivilegedEgressFirewall(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	ctx := context.Background()
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10"); err != nil {
		t.Fatal(err)
	}
	other, err := l.AddExternal("other", lab.ExternalOptions{}, "198.51.100.10", "2001:db8:1::10")
	if err != nil {
		t.Fatal(err)
	}
	ns, free := l.CP.Namespace(t), l.CP.Namespace(t)
	a0 := addPod(t, l.Nodes[0], ns, "a0", lab.PodOptions{})
	a1 := addPod(t, l.Nodes[1], ns, "a1", lab.PodOptions{})
	srv := addPod(t, l.Nodes[1], free, "srv", lab.PodOptions{})
	for _, p := range []*lab.Pod{a0, srv} {
		if err := p.Serve(8080); err != nil {
			t.Fatal(err)
		}
	}

	apply(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 203.0.113.10/32}, ports: [{protocol: TCP, port: 443}]}
  - {type: Allow, to: {cidrSelector: "2001:db8::10/128"}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
  - {type: Deny, to: {cidrSelector: "::/0"}}`)
	start := time.Now()
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default", "status.status", fwApplied, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("status %q %s after create", fwApplied, time.Since(start).Round(time.Millisecond))
	ef, err := l.Kube.Get(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default")
	if err != nil {
		t.Fatal(err)
	}
	msgs, _, _ := unstructuredStrings(ef.Object, "status", "messages")
	for _, n := range l.Nodes {
		if !contains(msgs, n.Name+": "+fwApplied) {
			t.Errorf("messages %v lack %q", msgs, n.Name+": "+fwApplied)
		}
	}

	var cases []reach
	for _, p := range []*lab.Pod{a0, a1} {
		cases = append(cases,
			reach{p, "203.0.113.10:443", false, lab.OK},
			reach{p, "203.0.113.10:80", false, lab.Timeout},
			reach{p, "203.0.113.10:443", true, lab.Timeout},
			reach{p, "198.51.100.10:80", false, lab.Timeout},
			reach{p, "[2001:db8::10]:80", false, lab.OK},
			reach{p, "[2001:db8::10]:443", true, lab.OK},
			reach{p, "[2001:db8:1::10]:80", false, lab.Timeout},
			reach{p, lab.HostPort(srv.IPv4, 8080), false, lab.OK}, // pod to pod, other node
			reach{p, lab.HostPort(srv.IPv6, 8080), true, lab.OK},
		)
	}
	checkReach(t, "enforced", cases)
	// The deny rule's counters on node-0 count what it dropped.
	series := `egressd_egressfirewall_rule_packets_total{action="Deny",namespace="` + ns + `",rule="2"}`
	if v, err := l.Nodes[0].Agent.Sample(series); err != nil || v == "" || v == "0" {
		t.Errorf("%s = %q (%v), want > 0", series, v, err)
	}
	// Firewalls of earlier tests' namespaces may still be being deleted: at least this one.
	if v, _ := l.Nodes[0].Agent.Sample("egressd_egressfirewalls"); v == "" || v == "0" {
		t.Errorf("egressd_egressfirewalls = %q", v)
	}
	// egressctl on node-0 tells what its classifier does and shows the counters.
	pin := lab.PinRoot(l.ID, l.Nodes[0].Name)
	for args, want := range map[string]string{
		"trace " + a0.IPv4.String() + " 203.0.113.10 tcp/80":  "firewall: deny by rule 2 of " + ns + ": Deny to 0.0.0.0/0",
		"trace " + a0.IPv4.String() + " 203.0.113.10 tcp/443": "firewall: allow by rule 0 of " + ns + ": Allow to 203.0.113.10/32 ports TCP/443",
		"trace " + a0.IPv4.String() + " 10.244.1.3 udp/53":    "not applied",
		"firewall": "Deny to ::/0",
	} {
		f := strings.Fields(args)
		out, err := l.Nodes[0].NS.Run(egressctl(t), append([]string{f[0], "--bpf-pin-root", pin}, f[1:]...)...)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("egressctl %s: %v\n%s\nwant %q", args, err, out, want)
		}
	}
	// egressctl status on node-0: the agent's version and the firewall applied.
	out, err := l.Nodes[0].NS.Run(egressctl(t), "status", "-o", "json", "--bpf-pin-root", pin, "--metrics-address", l.Nodes[0].Agent.MetricsAddr)
	type objects struct {
		Kind    string `json:"kind"`
		Applied int    `json:"applied"`
	}
	var status struct {
		AgentVersion  string    `json:"agentVersion"`
		Objects       []objects `json:"objects"`
		FirewallRules int       `json:"firewallRules"`
	}
	if err == nil {
		err = json.Unmarshal([]byte(out), &status)
	}
	applied := slices.ContainsFunc(status.Objects, func(o objects) bool { return o.Kind == "EgressFirewall" && o.Applied > 0 })
	if err != nil || status.AgentVersion == "" ||
		!applied || status.FirewallRules == 0 {
		t.Errorf("egressctl status -o json: %v\n%s", err, out)
	}
	// Inbound connections to a pod, and their replies, pass under deny-all.
	if r := other.TCP(lab.HostPort(a0.IPv4, 8080), lab.ClientOptions{Timeout: quick}); r.Outcome != lab.OK {
		t.Errorf("inbound to a pod under deny-all: %s", r)
	}
	if r := other.TCP(lab.HostPort(a0.IPv6, 8080), lab.ClientOptions{Timeout: quick}); r.Outcome != lab.OK {
		t.Errorf("inbound IPv6 to a pod under deny-all: %s", r)
	}

	// An update opens 198.51.100.10.
	apply(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 203.0.113.10/32}, ports: [{protocol: TCP, port: 443}]}
  - {type: Allow, to: {cidrSelector: 198.51.100.0/24}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}`)
	// Each node's agent applies it on its own: wait for both.
	poll.Eventually(t, "the update enforced on both nodes", 10*time.Second, func() error {
		return errors.Join(reach{a0, "198.51.100.10:80", false, lab.OK}.check(), reach{a1, "198.51.100.10:80", false, lab.OK}.check())
	})
	checkReach(t, "updated", []reach{{a1, "203.0.113.10:80", false, lab.Timeout}, {a0, "[2001:db8:1::10]:80", false, lab.OK}})

	// An invalid update is reported and keeps the rules in force (fail closed).
	apply(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {dnsName: "-bad.example.com"}}
  - {type: Allow, to: {cidrSelector: 0.0.0.0/0}}`)
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default", "status.status", fwNotApplied, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	// The aggregate follows the first node's report; each node's own message may come later.
	waitFirewallMessage(t, l, ns, l.Nodes[0].Name+": "+fwNotApplied+": cannot create EgressFirewall Rule to destination  for namespace "+ns+": invalid dns name used as rule destination, -bad.example.com")
	checkReach(t, "after an invalid update", []reach{{a0, "203.0.113.10:80", false, lab.Timeout}, {a1, "198.51.100.10:80", false, lab.OK}})
	waitEventFor(t, l.Client, ns, "reason=EgressFirewallNotApplied", "an EgressFirewallNotApplied event naming the bad name", func(e corev1.Event) bool {
		return strings.Contains(e.Message, "invalid dns name used as rule destination, -bad.example.com")
	})

	// Deleting the firewall lifts it.
	if err := l.Kube.Delete(ctx, "k8s.ovn.org/v1", "EgressFirewall", ns, "default"); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "the deleted firewall lifted", 10*time.Second, reach{a0, "203.0.113.10:80", false, lab.OK}.check)
	checkReach(t, "deleted", []reach{{a1, "[2001:db8:1::10]:80", false, lab.OK}})
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
