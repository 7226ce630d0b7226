package egressfirewall

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

func ef(ns string, rules ...ovnv1.EgressFirewallRule) *ovnv1.EgressFirewall {
	return &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}, Spec: ovnv1.EgressFirewallSpec{Egress: rules}}
}

func cidrRule(t ovnv1.EgressFirewallRuleType, cidr string, ports ...ovnv1.EgressFirewallPort) ovnv1.EgressFirewallRule {
	return ovnv1.EgressFirewallRule{Type: t, To: ovnv1.EgressFirewallDestination{CIDRSelector: cidr}, Ports: ports}
}

func node(name string, labels map[string]string, hostCIDRs string, addrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if hostCIDRs != "" {
		n.Annotations = map[string]string{cluster.HostCIDRsKey: hostCIDRs}
	}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	return n
}

// everywhere are local pods in the namespaces of objs' EgressFirewalls: the node enforces them.
func everywhere(objs ...runtime.Object) []dataplane.Pod {
	var pods []dataplane.Pod
	for _, o := range objs {
		if e, ok := o.(*ovnv1.EgressFirewall); ok {
			pods = append(pods, dataplane.Pod{Origin: dataplane.Origin{Kind: "Pod", Namespace: e.Namespace, Name: "p"}})
		}
	}
	return pods
}

func compileFW(t *testing.T, objs ...runtime.Object) []dataplane.Firewall {
	t.Helper()
	in := &cluster.Input{Snap: watcherstest.Snapshot(objs...), Pods: everywhere(objs...), Networks: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, Lookup: func(name string) []netip.Addr {
		if name == "www.example.com" {
			return []netip.Addr{netip.MustParseAddr("203.0.113.20"), netip.MustParseAddr("10.244.1.1")}
		}
		return nil
	}}
	part, err := new(Compiler).Compile(in)
	if err != nil {
		t.Fatal(err)
	}
	return part.Firewalls
}

func TestCompileFirewallRules(t *testing.T) {
	fws := compileFW(t,
		ef("a",
			cidrRule("Allow", "192.0.2.0/24", ovnv1.EgressFirewallPort{Protocol: "TCP", Port: 443}, ovnv1.EgressFirewallPort{Protocol: "SCTP", Port: 9}),
			cidrRule("Allow", "10.1.2.3/16"),
			ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "infra"}}}},
			ovnv1.EgressFirewallRule{Type: "Deny", To: ovnv1.EgressFirewallDestination{DNSName: "WWW.example.com"}},
			cidrRule("Deny", "::/0"),
		),
		node("n1", map[string]string{"role": "infra"}, `["172.18.0.10/24","172.18.1.13/24","fc00::10/64"]`, "172.18.0.10"),
		node("n2", map[string]string{"role": "worker"}, "", "172.18.0.11"),
		node("n3", map[string]string{"role": "infra"}, "", "172.18.0.12"),
	)
	if len(fws) != 1 || fws[0].Err != nil {
		t.Fatalf("%+v", fws)
	}
	r := fws[0].Rules
	if r[0].Deny || !slices.Equal(r[0].Ports, []dataplane.Port{{Protocol: 6, Port: 443}, {Protocol: 132, Port: 9}}) || r[0].Prefixes[0].String() != "192.0.2.0/24" {
		t.Errorf("rule 0: %+v", r[0])
	}
	if r[1].Prefixes[0].String() != "10.1.0.0/16" {
		t.Errorf("rule 1 host bits: %v", r[1].Prefixes)
	}
	var nodes []string
	for _, p := range r[2].Prefixes {
		nodes = append(nodes, p.String())
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	if want := []string{"172.18.0.10/32", "172.18.0.12/32", "172.18.1.13/32", "fc00::10/128"}; !slices.Equal(nodes, want) {
		t.Errorf("node selector: %v, want %v (secondary address included, worker excluded)", nodes, want)
	}
	if !r[3].Deny || len(r[3].Prefixes) != 1 || r[3].Prefixes[0].String() != "203.0.113.20/32" {
		t.Errorf("dns rule: %+v, want the resolved address outside the cluster network", r[3])
	}
	if !r[4].Deny || r[4].Index != 4 {
		t.Errorf("rule 4: %+v", r[4])
	}
}

func TestCompileFirewallErrors(t *testing.T) {
	var many []ovnv1.EgressFirewallRule
	for i := range maxRules + 2 {
		many = append(many, cidrRule("Deny", fmt.Sprintf("10.%d.%d.0/24", i/250, i%250)))
	}
	upstreamMax := many[:maxRules+1] // upstream checks rule indices against 8000
	for _, tc := range []struct {
		name string
		ef   *ovnv1.EgressFirewall
		want string
	}{
		{"too many", ef("a", many...), "egressFirewall for namespace a has too many rules, max allowed number is 8000"},
		{"wildcard dns", ef("a", ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{DNSName: "*.example.com"}}), ""},
		{"one label", ef("a", ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{DNSName: "localhost"}}), "invalid dns name used as rule destination, localhost"},
		{"a label ending in a hyphen", ef("a", ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{DNSName: "a-.example.com"}}), "invalid dns name used as rule destination, a-.example.com"},
		{"a wildcard not first", ef("a", ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{DNSName: "a.*.example.com"}}), "invalid dns name used as rule destination, a.*.example.com"},
		{"bad selector", ef("a", ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Bogus"}}}}}), "rule destination has invalid node selector"},
		{"8001 is fine, as upstream", ef("a", upstreamMax...), ""},
		// The API server's cidr format takes both; upstream's net.ParseCIDR only the first.
		{"prefix length with a leading zero, as upstream", ef("a", cidrRule("Deny", "10.0.0.0/08")), ""},
		{"octet with a leading zero", ef("a", cidrRule("Deny", "010.0.0.0/8")),
			"cannot create EgressFirewall Rule to destination 010.0.0.0/8 for namespace a: invalid CIDR address: 010.0.0.0/8"},
		{"several errors on one line", ef("a",
			ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{DNSName: "-a.com"}},
			ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{DNSName: "-b.com"}}),
			"[cannot create EgressFirewall Rule to destination  for namespace a: invalid dns name used as rule destination, -a.com, " +
				"cannot create EgressFirewall Rule to destination  for namespace a: invalid dns name used as rule destination, -b.com]"},
	} {
		fws := compileFW(t, tc.ef)
		err := fws[0].Err
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A firewall that only depends on its spec is compiled once per generation.
func TestCompileFirewallMemo(t *testing.T) {
	e := ef("a", cidrRule("Deny", "10.0.0.0/8"))
	e.UID, e.Generation = "uid-1", 1
	c := &Compiler{}
	m := &c.memo
	compile := func() []dataplane.Firewall {
		part, err := c.Compile(&cluster.Input{Snap: watcherstest.Snapshot(e), Pods: everywhere(e)})
		if err != nil {
			t.Fatal(err)
		}
		return part.Firewalls
	}
	first := compile()
	if _, ok := m.firewall(e, true, 0, 0); !ok {
		t.Fatal("not memoized")
	}
	second := compile()
	if &first[0].Rules[0] != &second[0].Rules[0] {
		t.Error("recompiled an unchanged firewall")
	}
	e.Spec.Egress[0].Type = "Allow"
	e.Generation = 2
	if third := compile(); third[0].Rules[0].Deny {
		t.Errorf("a new generation was not recompiled: %+v", third[0].Rules[0])
	}
}

// A deleted firewall is forgotten at the next compile, enforced or only checked on this node,
// its last valid rules too; one still listed is kept.
func TestCompileFirewallMemoForgetsDeleted(t *testing.T) {
	a, b, other := ef("a", cidrRule("Deny", "10.0.0.0/8")), ef("b", cidrRule("Deny", "10.0.0.0/8")), ef("c", cidrRule("Deny", "10.0.0.0/8"))
	a.UID, b.UID, other.UID = "uid-a", "uid-b", "uid-c"
	c := &Compiler{}
	compile := func(efs ...*ovnv1.EgressFirewall) {
		objs := make([]runtime.Object, len(efs))
		for i, e := range efs {
			objs[i] = e
		}
		if _, err := c.Compile(&cluster.Input{Snap: watcherstest.Snapshot(objs...), Pods: everywhere(a, b)}); err != nil {
			t.Fatal(err)
		}
	}
	compile(a, b, other)
	if len(c.memo.firewalls) != 3 || len(c.memo.lastValid) != 3 {
		t.Fatalf("memo holds %d firewalls (%d last valid), want 3", len(c.memo.firewalls), len(c.memo.lastValid))
	}
	compile(a)
	if _, ok := c.memo.firewalls["uid-a"]; !ok || len(c.memo.firewalls) != 1 || len(c.memo.lastValid) != 1 {
		t.Errorf("after b and c were deleted, the memo holds %v (last valid %d), want a's alone", slices.Collect(maps.Keys(c.memo.firewalls)), len(c.memo.lastValid))
	}
}

// A firewall whose rules read the nodes or DNS answers is compiled again when those move, not
// at every sync: a nodeSelector rule when a Node changed, a dnsName rule when its name's
// addresses did.
func TestCompileFirewallMemoInputs(t *testing.T) {
	e := ef("a", ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{DNSName: "api.example.com"}},
		ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{NodeSelector: &metav1.LabelSelector{}}})
	e.UID, e.Generation = "uid-1", 1
	snap := watcherstest.Snapshot(e)
	gens := watchers.NewGenerations(&ovnv1.EgressFirewall{}, &corev1.Node{}, &corev1.Namespace{})
	snap.Generations = gens
	answer := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
	c := &Compiler{}
	compile := func() []dataplane.FirewallRule {
		t.Helper()
		c.list.valid = false // the list is not kept with a dnsName rule anyway
		part, err := c.Compile(&cluster.Input{Snap: snap, Pods: everywhere(e), Lookup: func(string) []netip.Addr { return answer }})
		if err != nil {
			t.Fatal(err)
		}
		return part.Firewalls[0].Rules
	}
	first := compile()
	if again := compile(); &again[0] != &first[0] {
		t.Error("recompiled with the same answers and nodes")
	}
	answer = append(answer, netip.MustParseAddr("192.0.2.2"))
	second := compile()
	if &second[0] == &first[0] || len(second[0].Prefixes) != 2 {
		t.Errorf("a new answer was not compiled in: %+v", second[0])
	}
	gens.Changed(&corev1.Node{}, "")
	if third := compile(); &third[0] == &second[0] {
		t.Error("a Node change did not recompile a nodeSelector rule")
	}
}

// While no EgressFirewall, Node or Namespace changed, nor the cluster networks or the answers
// of the names of dnsName rules, the same list is handed on (the dataplane recognizes it); any
// of them changing compiles it again. Backend denies, which depend on pods too, are judged
// every time.
func TestCompileFirewallListKept(t *testing.T) {
	e := ef("a", cidrRule("Deny", "10.0.0.0/8"))
	snap := watcherstest.Snapshot(e)
	snap.Generations = watchers.NewGenerations(&ovnv1.EgressFirewall{}, &corev1.Node{}, &corev1.Namespace{})
	c := &Compiler{}
	local := everywhere(e, ef("b"))
	var answer []netip.Addr
	networks := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	compile := func() []dataplane.Firewall {
		t.Helper()
		part, err := c.Compile(&cluster.Input{Snap: snap, Pods: local, Networks: networks, Lookup: func(string) []netip.Addr { return answer }})
		if err != nil {
			t.Fatal(err)
		}
		return part.Firewalls
	}
	same := func(a, b []dataplane.Firewall) bool { return len(a) == len(b) && &a[0] == &b[0] }
	first := compile()
	if !same(first, compile()) {
		t.Error("nothing changed, yet the list was compiled again")
	}
	for _, kind := range []any{&ovnv1.EgressFirewall{}, &corev1.Node{}, &corev1.Namespace{}} {
		snap.Generations.Changed(kind, "")
		if next := compile(); same(first, next) {
			t.Errorf("a %T changed, yet the list was kept", kind)
		} else {
			first = next
		}
	}
	// The version names the list: the same while kept, another once compiled again.
	in := &cluster.Input{Snap: snap, Pods: local, Networks: networks, Lookup: func(string) []netip.Addr { return nil }}
	p1, _ := c.Compile(in)
	p2, _ := c.Compile(in)
	snap.Generations.Changed(&corev1.Node{}, "")
	p3, _ := c.Compile(in)
	if p1.Version == 0 || p2.Version != p1.Version || p3.Version == p1.Version {
		t.Errorf("versions %d, %d (kept), %d (compiled again): want the same nonzero, then another", p1.Version, p2.Version, p3.Version)
	}
	withDNS := ef("b", ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{DNSName: "example.com"}})
	snap2 := watcherstest.Snapshot(e, withDNS)
	snap2.Generations = snap.Generations
	snap = snap2
	snap.Generations.Changed(&ovnv1.EgressFirewall{}, "")
	dns := compile()
	if !same(dns, compile()) {
		t.Error("a list with a dnsName rule was compiled again with the same answers")
	}
	answer = []netip.Addr{netip.MustParseAddr("192.0.2.7")}
	if next := compile(); same(dns, next) || len(next[1].Rules) != 1 || len(next[1].Rules[0].Prefixes) != 1 {
		t.Errorf("a name's new answer: the list was kept, or lacks it (%+v)", next)
	} else {
		dns = next
	}
	networks = append(networks, netip.MustParsePrefix("10.96.0.0/16"))
	if same(dns, compile()) {
		t.Error("the cluster networks changed, yet the list was kept")
	}
}

func TestCompileFirewallACLLogging(t *testing.T) {
	ns := func(name, annotation string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{ACLLoggingKey: annotation}}}
	}
	e1, e2, e3 := ef("a", cidrRule(ovnv1.EgressFirewallRuleDeny, "0.0.0.0/0")), ef("b"), ef("c")
	e1.UID, e2.UID, e3.UID = "1", "2", "3"
	fws := compileFW(t, e1, e2, e3, ns("a", `{"deny": "alert", "allow": "notice"}`), ns("b", `{"deny": "loud"}`), ns("c", `not json`))
	want := map[string]dataplane.ACLLog{"a": {Allow: "notice", Deny: "alert"}, "b": {}, "c": {}}
	if len(fws) != len(want) {
		t.Fatalf("compiled %d firewalls, want %d", len(fws), len(want))
	}
	for _, fw := range fws {
		if fw.Log != want[fw.Origin.Namespace] {
			t.Errorf("%s: log %+v, want %+v", fw.Origin.Namespace, fw.Log, want[fw.Origin.Namespace])
		}
	}
}

// TestCompileEnforcesOnlyLocalNamespaces: the node enforces the firewalls of the namespaces
// with a pod here, and checks every other one for its status entry: an invalid firewall of a
// namespace without a pod here still reports its error, and its names are not resolved. A
// first pod of another namespace brings that namespace's rules, under a new version.
func TestCompileEnforcesOnlyLocalNamespaces(t *testing.T) {
	a := ef("a", ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{DNSName: "a.example.com"}}, cidrRule("Deny", "0.0.0.0/0"))
	b := ef("b", ovnv1.EgressFirewallRule{Type: "Allow", To: ovnv1.EgressFirewallDestination{DNSName: "b.example.com"}}, cidrRule("Deny", "0.0.0.0/0"))
	bad := ef("c", cidrRule("Deny", "not-a-cidr"))
	a.UID, b.UID, bad.UID = "uid-a", "uid-b", "uid-c"
	snap := watcherstest.Snapshot(a, b, bad)
	snap.Generations = watchers.NewGenerations(&ovnv1.EgressFirewall{}, &corev1.Node{}, &corev1.Namespace{})
	c := &Compiler{}
	compile := func(pods ...dataplane.Pod) Part {
		t.Helper()
		part, err := c.Compile(&cluster.Input{Snap: snap, Pods: pods, Lookup: func(string) []netip.Addr { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		return part
	}
	namespaces := func(fws []dataplane.Firewall) []string {
		var out []string
		for _, fw := range fws {
			out = append(out, fw.Origin.Namespace)
		}
		return out
	}
	origin := func(ns string) dataplane.Origin {
		return dataplane.Origin{Kind: cluster.KindEgressFirewall, Namespace: ns, Name: "default"}
	}

	first := compile(everywhere(a)...)
	if got := namespaces(first.Firewalls); !slices.Equal(got, []string{"a"}) {
		t.Errorf("enforced %v, want [a]: the only namespace with a pod here", got)
	}
	if !slices.Equal(first.DNSNames, []string{"a.example.com"}) || !slices.Equal(first.DNSNamespaces, []string{"a"}) {
		t.Errorf("names %v of namespaces %v, want a's alone", first.DNSNames, first.DNSNamespaces)
	}
	if len(first.Statuses.All) != 3 || first.Statuses.All[origin("a")] != nil || first.Statuses.All[origin("b")] != nil {
		t.Errorf("statuses %v, want a and b fine, c failing", first.Statuses.All)
	}
	if err := first.Statuses.All[origin("c")]; err == nil || !strings.Contains(err.Error(), "not-a-cidr") {
		t.Errorf("the invalid firewall of a namespace without a pod here: %v, want its error", err)
	}

	second := compile(everywhere(a, b)...)
	if got := namespaces(second.Firewalls); !slices.Equal(got, []string{"a", "b"}) || second.Version == first.Version {
		t.Errorf("after a pod of b: enforced %v (version %d, was %d), want [a b] under a new version", got, second.Version, first.Version)
	}
	if got := compile(); len(got.Firewalls) != 0 || len(got.Statuses.All) != 3 {
		t.Errorf("no pod here: enforced %v, %d statuses; want none enforced, 3 statuses", namespaces(got.Firewalls), len(got.Statuses.All))
	}
}

// TestCompileEnforcesTheLastValidRules: an update that does not compile leaves the last valid
// rules in force, also on a node where the namespace had no pod when they were valid: its
// first pod since gets those rules, and the status the update's error.
func TestCompileEnforcesTheLastValidRules(t *testing.T) {
	v1 := ef("a", cidrRule("Deny", "0.0.0.0/0"))
	v1.UID, v1.Generation = "uid-a", 1
	v2 := ef("a", cidrRule("Deny", "not-a-cidr"))
	v2.UID, v2.Generation = "uid-a", 2
	gens := watchers.NewGenerations(&ovnv1.EgressFirewall{}, &corev1.Node{}, &corev1.Namespace{})
	c := &Compiler{}
	compile := func(e *ovnv1.EgressFirewall, pods ...dataplane.Pod) Part {
		t.Helper()
		snap := watcherstest.Snapshot(e)
		snap.Generations = gens
		gens.Changed(&ovnv1.EgressFirewall{}, "")
		part, err := c.Compile(&cluster.Input{Snap: snap, Pods: pods, Lookup: func(string) []netip.Addr { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		return part
	}
	origin := dataplane.Origin{Kind: cluster.KindEgressFirewall, Namespace: "a", Name: "default"}
	compile(v1) // valid, no pod here
	compile(v2) // invalid, no pod here
	part := compile(v2, everywhere(v2)...)
	if len(part.Firewalls) != 1 || part.Firewalls[0].Err != nil || len(part.Firewalls[0].Rules) != 1 || !part.Firewalls[0].Rules[0].Deny {
		t.Fatalf("a first pod after an invalid update: enforced %+v, want v1's deny-all", part.Firewalls)
	}
	if err := part.Statuses.All[origin]; err == nil || !strings.Contains(err.Error(), "not-a-cidr") {
		t.Errorf("status: %v, want the update's error", err)
	}
	v3 := ef("a", cidrRule("Allow", "0.0.0.0/0"))
	v3.UID, v3.Generation = "uid-a", 3
	if part := compile(v3, everywhere(v3)...); part.Firewalls[0].Rules[0].Deny || part.Statuses.All[origin] != nil {
		t.Errorf("a valid update: enforced %+v (status %v), want v3's allow", part.Firewalls[0].Rules, part.Statuses.All[origin])
	}
}
