package kernel_test

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/addresses"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/kernel"
	"github.com/egressd/egressd/dataplane/tc"
	"github.com/egressd/egressd/test/netns"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedApplierComplete applies a State with every section filled, reads the kernel
// back (classifier maps, nftables, rules, tables, addresses, tcx) and sends real traffic: the
// pod reaches the external host only through the mark, its table and the SNAT to the egress
// address (the answer comes back through it); a denied destination is dropped.
func TestPrivilegedApplierComplete(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	a := l.applier(t)
	res := l.apply(t, a, fullState())
	if len(res.Failed) > 0 {
		t.Fatalf("Apply failed: %v", res.Failed)
	}

	// Classifier maps, through egressctl's reader.
	in, err := classifier.Inspect(l.root)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for _, c := range []struct {
		to                netip.Addr
		verdict           string
		rule, dscp        int
		mark              uint32
		exempt            bool
		namespace, reason string
	}{
		{dst, "allow", -1, 10, mark, false, "a", "QoS'd and steered"},
		{allowed, "allow", -1, -1, mark, false, "a", "steered, no QoS"},
		{denied, "deny", 0, -1, 0, false, "a", "denied: never marked"},
		{nodeIP, "allow", -1, -1, 0, false, "a", "node address: steering exempt"},
		{serviceIP, "allow", -1, -1, 0, true, "a", "cluster network: exempt"},
	} {
		tr, err := in.Trace(podIP, c.to, 17, udpPort)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Namespace != c.namespace || tr.Verdict != c.verdict || tr.Rule != c.rule || tr.DSCP != c.dscp || tr.Mark != c.mark || tr.Exempt != c.exempt {
			t.Errorf("%s: trace to %s = %+v", c.reason, c.to, tr)
		}
	}
	fw, err := in.Rules(false)
	if err != nil || len(fw) != 1 || fw[0].Namespace != "a" || fw[0].Index != 0 || fw[0].Text != "Deny to 198.51.100.10/32" {
		t.Errorf("firewall rules %+v (%v)", fw, err)
	}
	for _, c := range []struct {
		namespace string
		index     int
		want      bool
	}{{"a", 0, true}, {"a", 1, false}, {"b", 0, false}} {
		text, ok, err := in.FirewallRule(c.namespace, c.index)
		if err != nil || ok != c.want || ok && text != "Deny to 198.51.100.10/32" {
			t.Errorf("firewall rule %d of %s: %q, %v (%v); want programmed %v", c.index, c.namespace, text, ok, err, c.want)
		}
	}
	qos, err := in.Rules(true)
	if err != nil || len(qos) != 1 || qos[0].Namespace != "a" || qos[0].Text != "DSCP 10 to 203.0.113.0/24" {
		t.Errorf("QoS rules %+v (%v)", qos, err)
	}

	// nftables.
	els := elements(l.nft(t))
	for set, want := range map[string]string{
		"egressip_snat4":           "10.244.0.5 : 192.0.2.100",
		"egressip_guarded4":        "10.244.0.5",
		"egressip_exempt4":         "10.96.0.0/12, 10.244.0.0/16, 192.0.2.1",
		"egressip_steer_nexthops4": "0x00010000 . 192.0.2.2",
		"egressip_addrs4":          "192.0.2.100 counter packets 0 bytes 0",
		"egressip_snat6":           "",
		"fw_backend_deny4":         "",
	} {
		if got, ok := els[set]; !ok || got != want {
			t.Errorf("nft set %s = %q, want %q", set, got, want)
		}
	}

	// Routing: the rules of both families select the table; IPv4 goes via the external host,
	// IPv6 is dropped rather than leaked.
	if got, want := l.ownedRules(t), []string{
		"-4 6101: from all fwmark 0x10000/0xff0000 lookup 7101 proto 229",
		"-6 6101: from all fwmark 0x10000/0xff0000 lookup 7101 proto 229",
	}; !slices.Equal(got, want) {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got, want := l.ip(t, "-4", "route", "show", "table", "7101"), "default via 192.0.2.2 dev ext0 proto 229"; got != want {
		t.Errorf("table 7101: %q, want %q", got, want)
	}
	if got, want := l.ip(t, "-6", "route", "show", "table", "7101"), "blackhole default dev lo proto 229 metric 1024 pref medium"; got != want {
		t.Errorf("IPv6 table 7101: %q, want %q", got, want)
	}
	if got := l.ip(t, "route", "get", dst.String(), "mark", "0x10000"); !strings.Contains(got, "via 192.0.2.2 dev ext0 table 7101") {
		t.Errorf("marked route to %s: %q", dst, got)
	}
	if out, err := l.node.Run("ip", "route", "get", dst.String()); err == nil {
		t.Errorf("unmarked traffic has a way out of the node, it should not: %s", out)
	}

	// The egress address: on the interface of its network, host prefix, stamped.
	if got, want := l.addresses(t), map[string]uint8{"127.0.0.1/8 lo": 0, "10.244.0.1/32 pod0": 0, "192.0.2.1/24 ext0": 0, "192.0.2.100/32 ext0": protocol}; !maps.Equal(got, want) {
		t.Errorf("addresses (protocol) %v, want %v", got, want)
	}
	if slices.Equal(res.HostCIDRs, nil) || slices.Contains(res.HostCIDRs, netip.PrefixFrom(egressIP, 32)) {
		t.Errorf("HostCIDRs %v", res.HostCIDRs)
	}

	// tc: the classifier on the pod's interface, its filter (no other program is there).
	if got := l.ingressPrograms(t, "pod0"); !slices.Equal(got, []string{"egressd_frompod tc filter pref 49152 handle 0x1"}) {
		t.Errorf("ingress of pod0 runs %v", got)
	}

	// Real traffic.
	ext := serveUDP(t, l.ext, dst, allowed, denied)
	if echo, err := l.send(t, dst, "to dst", 3*time.Second); err != nil || echo != "to dst" {
		t.Errorf("pod -> %s: no answer (%q, %v)", dst, echo, err)
	}
	if from := ext.from("to dst", time.Second); from != egressIP {
		t.Errorf("pod -> %s arrived from %v, want the egress address %v", dst, from, egressIP)
	}
	if echo, err := l.send(t, allowed, "to allowed", 3*time.Second); err != nil || echo != "to allowed" {
		t.Errorf("pod -> %s: no answer (%q, %v)", allowed, echo, err)
	}
	if from := ext.from("to allowed", time.Second); from != egressIP {
		t.Errorf("pod -> %s arrived from %v, want %v", allowed, from, egressIP)
	}
	if _, err := l.send(t, denied, "to denied", 500*time.Millisecond); err == nil {
		t.Errorf("pod -> %s (denied) was answered", denied)
	}
	if from := ext.from("to denied", 500*time.Millisecond); from.IsValid() {
		t.Errorf("pod -> %s (denied) arrived from %v", denied, from)
	}
	if got := l.received(t); got[dst.String()+" dscp af11"] < 1 || got[allowed.String()+" dscp cs0"] < 1 {
		t.Errorf("external host's counters by DSCP: %v, want DSCP 10 to %s, 0 to %s", got, dst, allowed)
	}
	fw, err = in.Rules(false)
	if err != nil || len(fw) != 1 || fw[0].Counters.Packets < 1 {
		t.Errorf("the deny rule counted nothing: %+v (%v)", fw, err)
	}
	if t.Failed() {
		t.Logf("nft:\n%s\nrules:\n%s\naddresses:\n%s", l.nft(t), l.ip(t, "rule"), l.ip(t, "-d", "addr"))
	}
}

// TestPrivilegedApplierPhaseOrder: each write of an Apply is held until the kernel has been
// checked as it is then, so every state the kernel passes through is seen. Adding a steered
// pod: SNAT and leak guards, the egress address, the table, then the rule, and only then the
// pod's mark and the attachment; a marked packet never meets a missing route. Applying an
// empty State removes in reverse: the mark and the attachment, then rules, tables, then the
// address; the table inet egressd stays, empty.
func TestPrivilegedApplierPhaseOrder(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	a := l.applier(t)
	// Cluster networks and exemptions first, no pod: then a steered pod arrives.
	base := fullState()
	base.Classifier.Pods, base.Nftables.SNAT, base.Nftables.Guarded, base.Nftables.SteerNexthops = nil, nil, nil, nil
	base.Routing, base.Addresses = dataplane.RoutingState{}, nil
	l.mustApply(t, a, base)

	v := l.invariants(t, true)
	writes, res := l.tracedApply(t, a, fullState(), v)
	if len(res.Failed) > 0 {
		t.Fatalf("Apply failed: %v", res.Failed)
	}
	t.Logf("writes adding the pod: %v", writes)
	for _, b := range v.broken {
		t.Errorf("adding a steered pod: %s", b)
	}
	ordered(t, writes, "nft", "RTM_NEWADDR", "RTM_NEWROUTE", "RTM_NEWRULE", "bpf:update", "RTM_NEWTFILTER")
	if i := firstIndex(writes, "RTM_DEL"); i >= 0 {
		t.Errorf("adding removed something: %v", writes[i])
	}
	if !v.marked() || !v.rule() || !v.route() || !v.address() || !v.nft() {
		t.Fatalf("not programmed: marked=%v rule=%v route=%v address=%v nft=%v", v.marked(), v.rule(), v.route(), v.address(), v.nft())
	}

	v = l.invariants(t, false)
	writes, res = l.tracedApply(t, a, &dataplane.State{}, v)
	if len(res.Failed) > 0 {
		t.Fatalf("Apply of an empty State failed: %v", res.Failed)
	}
	t.Logf("writes removing everything: %v", writes)
	for _, b := range v.broken {
		t.Errorf("removing: %s", b)
	}
	// The classifier's filter goes, then the clsact qdisc it emptied.
	ordered(t, writes, "nft", "bpf:delete", "RTM_DELTFILTER", "RTM_DELQDISC", "RTM_DELRULE", "RTM_DELROUTE", "RTM_DELADDR")
	if i := firstIndex(writes, "RTM_NEW"); i >= 0 {
		t.Errorf("removing added something: %v", writes[i])
	}

	// Everything gone, the table stays, its sets empty.
	if v.marked() {
		t.Error("the pod is still marked")
	}
	in, err := classifier.Inspect(l.root)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if tr, err := in.Trace(podIP, dst, 17, udpPort); err != nil || tr.Namespace != "" {
		t.Errorf("the pod still has a classifier entry: %+v (%v)", tr, err)
	}
	if got := l.ownedRules(t); len(got) > 0 {
		t.Errorf("rules left: %v", got)
	}
	for _, fam := range []string{"-4", "-6"} {
		if got := l.ip(t, fam, "route", "show", "table", "7101"); got != "" {
			t.Errorf("table 7101 (%s) left: %q", fam, got)
		}
	}
	if v.address() {
		t.Error("egress address left")
	}
	if got := l.ingressPrograms(t, "pod0"); len(got) > 0 {
		t.Errorf("still attached to pod0: %v", got)
	}
	if got := l.node.MustRun(t, "tc", "qdisc", "show", "dev", "pod0"); strings.Contains(got, "clsact") {
		t.Errorf("the clsact qdisc egressd added to pod0 is left: %s", got)
	}
	listing := l.nft(t)
	els := elements(listing)
	if len(els) == 0 {
		t.Errorf("table inet egressd lost its sets:\n%s", listing)
	}
	for set, e := range els {
		if e != "" {
			t.Errorf("nft set %s still holds %s", set, e)
		}
	}
}

// TestPrivilegedApplierIdempotent: a second Apply of the same State writes nothing (no bpf map
// or link write, no netlink change, no nft transaction), the kernel notifies nothing about
// egressd's objects, and every dump is unchanged.
func TestPrivilegedApplierIdempotent(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	a := l.applier(t)
	mon := l.monitor(t)
	l.mustApply(t, a, fullState())
	if events := mon.drain(t); len(events) < 5 { // address, 2 routes, 2 rules
		t.Fatalf("the monitor saw %d notifications of the first Apply: %v", len(events), events)
	}
	dumps := func() map[string]string {
		return map[string]string{
			"rules":   strings.Join(l.ownedRules(t), "\n"),
			"table4":  l.ip(t, "-4", "route", "show", "table", "all"),
			"table6":  withoutLinkLocal(l.ip(t, "-6", "route", "show", "table", "all")),
			"addr":    withoutLinkLocal(l.ip(t, "-d", "addr")),
			"nft":     l.node.MustRun(t, "nft", "-a", "list", "table", "inet", "egressd"),
			"ingress": fmt.Sprint(l.ingressPrograms(t, "pod0")),
			"addrs":   fmt.Sprint(l.addresses(t)),
			"nexthop": l.ip(t, "nexthop", "show"),
		}
	}
	before := dumps()
	v := l.invariants(t, true)
	writes, res := l.tracedApply(t, a, fullState(), v)
	if len(res.Failed) > 0 {
		t.Fatalf("second Apply failed: %v", res.Failed)
	}
	if len(writes) > 0 {
		t.Errorf("second Apply of the same State wrote %v", writes)
	}
	if events := mon.drain(t); len(events) > 0 {
		t.Errorf("second Apply changed egressd's routes, rules, addresses or nexthops: %v", events)
	}
	if after := dumps(); !maps.Equal(before, after) {
		for k := range before {
			if before[k] != after[k] {
				t.Errorf("%s changed:\n%s\n---\n%s", k, before[k], after[k])
			}
		}
	}
	for _, b := range v.broken {
		t.Error(b)
	}
}

// withoutLinkLocal drops the IPv6 link-local addresses (and their lifetimes' line) and routes
// from an ip dump: the kernel adds them once duplicate address detection is done on a new link,
// whenever that is on a busy machine; they are not egressd's.
func withoutLinkLocal(dump string) string {
	var out []string
	skip := false
	for _, line := range strings.Split(dump, "\n") {
		if skip && strings.Contains(line, "valid_lft") {
			skip = false
			continue
		}
		skip = false
		if strings.Contains(line, "fe80:") {
			skip = strings.Contains(line, "inet6 ")
			continue
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// TestPrivilegedApplierResult: failures are reported per Origin and limited to it: an
// EgressIP whose route goes via an unreachable gateway (its table becomes a blackhole: drop
// rather than leak), a pod with no interface on the node, a firewall that failed to compile;
// everything else is programmed. HostCIDRs are the node's own addresses: not the egress
// address, not the pod network's.
func TestPrivilegedApplierResult(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	a := l.applier(t)
	s := fullState()
	s.Classifier.Pods = append(s.Classifier.Pods, dataplane.Pod{Origin: ghostOrigin, IPs: []netip.Addr{ghostIP}})
	s.Classifier.Firewalls = append(s.Classifier.Firewalls, dataplane.Firewall{Origin: badFWOrigin, Err: errors.New("dnsName not resolvable")})
	s.Routing.Rules = append(s.Routing.Rules, dataplane.RouteRule{Origin: badOrigin, Priority: 2, Mark: badMark, Mask: dataplane.DefaultMarkMask, Table: 2})
	s.Routing.Tables = append(s.Routing.Tables, dataplane.RouteTable{Origin: badOrigin, ID: 2, Routes: []dataplane.Route{
		{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: &dataplane.Nexthop{Gateway: badGW}}}})
	res := l.apply(t, a, s)
	want := []dataplane.Origin{badOrigin, ghostOrigin, badFWOrigin}
	got := slices.Collect(maps.Keys(res.Failed))
	sortOrigins := func(o []dataplane.Origin) {
		slices.SortFunc(o, func(a, b dataplane.Origin) int { return strings.Compare(a.String(), b.String()) })
	}
	sortOrigins(got)
	sortOrigins(want)
	if !slices.Equal(got, want) {
		t.Errorf("failed %v, want exactly %v", res.Failed, want)
	}
	for _, o := range want {
		t.Logf("%s: %v", o, res.Failed[o])
	}
	if err := res.Failed[badOrigin]; err == nil || !strings.Contains(err.Error(), badGW.String()) {
		t.Errorf("the unreachable gateway's failure does not name it: %v", err)
	}
	if err := res.Failed[ghostOrigin]; err == nil || !strings.Contains(err.Error(), ghostIP.String()) {
		t.Errorf("the pod without interface's failure does not name its address: %v", err)
	}
	if got, want := l.ip(t, "-4", "route", "show", "table", "7102"), "blackhole default proto 229"; got != want {
		t.Errorf("table of the failed EgressIP: %q, want %q", got, want)
	}
	if got, want := l.ip(t, "-4", "route", "show", "table", "7101"), "default via 192.0.2.2 dev ext0 proto 229"; got != want {
		t.Errorf("table of the other EgressIP: %q, want %q", got, want)
	}
	if got := l.ownedRules(t); len(got) != 3 {
		t.Errorf("rules %v, want both EgressIPs' (the failed one selects its blackhole)", got)
	}
	// The rest works: the pod's traffic leaves with its egress address.
	ext := serveUDP(t, l.ext, dst, allowed, denied)
	if echo, err := l.send(t, dst, "after failures", 3*time.Second); err != nil || echo != "after failures" {
		t.Errorf("pod -> %s: no answer (%q, %v)", dst, echo, err)
	}
	if from := ext.from("after failures", time.Second); from != egressIP {
		t.Errorf("pod -> %s arrived from %v, want %v", dst, from, egressIP)
	}

	// HostCIDRs: the node's address on its network only. The egress address (host prefix,
	// egressd's) and the pod-facing gateway address (in a cluster network) are left out.
	if want := []netip.Prefix{netip.MustParsePrefix("192.0.2.1/24")}; !slices.Equal(res.HostCIDRs, want) {
		t.Errorf("HostCIDRs %v, want %v", res.HostCIDRs, want)
	}
	// Another host address is reported by the Apply of the sync it asks for.
	quiet(a)
	l.node.MustRun(t, "ip", "addr", "add", "198.18.0.1/15", "dev", "ext0")
	select {
	case <-a.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("no sync asked for after a host address was added")
	}
	res = l.apply(t, a, s)
	if want := []netip.Prefix{netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("198.18.0.1/15")}; !slices.Equal(res.HostCIDRs, want) {
		t.Errorf("HostCIDRs %v, want %v", res.HostCIDRs, want)
	}
}

// TestPrivilegedApplierCloseKeepsKernel: Close releases the Applier's file descriptors and
// leaves what it programmed in place; a new Applier on the same pin root adopts it: its first
// Apply of the same State changes no route, rule or address and updates the link in place.
func TestPrivilegedApplierCloseKeepsKernel(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	fds := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	before := fds()
	var a *kernel.Applier
	l.in(t, func() (err error) {
		a, err = kernel.New(kernel.Options{PinRoot: l.root}, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
		return err
	})
	l.mustApply(t, a, fullState())
	a.Close()
	leaked := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if leaked = fds() - before; leaked <= 0 {
			break
		}
	}
	if leaked > 0 {
		t.Errorf("Close left %d file descriptors open", leaked)
	}

	b := l.applier(t)
	v := l.invariants(t, true)
	if !v.marked() || !v.rule() || !v.route() || !v.address() || !v.nft() || len(l.ingressPrograms(t, "pod0")) != 1 {
		t.Fatalf("Close removed something: marked=%v rule=%v route=%v address=%v nft=%v ingress=%v", v.marked(), v.rule(), v.route(), v.address(), v.nft(), l.ingressPrograms(t, "pod0"))
	}
	writes, res := l.tracedApply(t, b, fullState(), v)
	if len(res.Failed) > 0 {
		t.Fatalf("Apply of the successor failed: %v", res.Failed)
	}
	// It adopts: routes, rules and addresses stay as they are, the filter is replaced in place;
	// nothing is removed or attached anew. (The nft table is written whole once, in one
	// transaction: a new agent does not know what the sets hold.)
	for _, w := range writes {
		if strings.HasPrefix(w.Kind, "RTM_") && w.Kind != "RTM_NEWTFILTER" || w.Kind == "bpf:delete" || w.Kind == "bpf:link" || w.Kind == "unlink" {
			t.Errorf("the successor's first Apply of the same State wrote %v", w)
		}
	}
	if n := count(writes, "RTM_NEWTFILTER"); n != 2 {
		t.Errorf("the successor swapped its programs into %d adopted filters, want 2 (classifier, companion): %v", n, writes)
	}
	t.Logf("successor's writes: %v", writes)
	for _, br := range v.broken {
		t.Error(br)
	}
}

// TestPrivilegedApplierSeesAddressChanges: an Apply lists the node's addresses only after they
// changed (or a minute passed), and a change of the node's own addresses counts: the next Apply
// reports an address added by the admin among the node's (HostCIDRs) and removes one stamped
// as egressd's that it does not want. A pod's gateway address (in the cluster networks) is
// never the node's, and needs no sync.
func TestPrivilegedApplierSeesAddressChanges(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	a := l.applier(t)
	// No egress address here (most nodes): nothing else lists the addresses.
	state := fullState()
	state.Addresses = nil
	l.mustApply(t, a, state)
	l.mustApply(t, a, state) // the listing is fresh now
	for len(a.Changed()) > 0 {
		<-a.Changed()
	}
	admin, drift, gateway := netip.MustParsePrefix("198.18.0.1/24"), netip.MustParseAddr("192.0.2.250"), netip.MustParsePrefix("10.244.9.1/32")
	// A pod's gateway address (a routed CNI's, on the host side): nothing to apply again.
	l.node.MustRun(t, "ip", "addr", "add", gateway.String(), "dev", "pod0")
	select {
	case <-a.Changed():
		t.Error("a pod gateway's address signalled a change")
	case <-time.After(300 * time.Millisecond):
	}
	l.node.MustRun(t, "ip", "addr", "add", admin.String(), "dev", "ext0")
	l.in(t, func() error { return addStamped("ext0", drift, addresses.DefaultProtocol) })
	select {
	case <-a.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("no change signalled for the added addresses")
	}
	res := l.apply(t, a, state)
	if !slices.Contains(res.HostCIDRs, admin) {
		t.Errorf("HostCIDRs %v lack %s, added to the node before this Apply", res.HostCIDRs, admin)
	}
	if slices.Contains(res.HostCIDRs, gateway) {
		t.Errorf("HostCIDRs %v hold the pod gateway %s", res.HostCIDRs, gateway)
	}
	got := l.addresses(t)
	if _, ok := got[drift.String()+"/32 ext0"]; ok {
		t.Errorf("%s, stamped as egressd's and not wanted, survived the Apply: %v", drift, got)
	}
	if _, ok := got[admin.String()+" ext0"]; !ok {
		t.Errorf("the admin's address %s is gone: %v", admin, got)
	}
}

// TestPrivilegedApplierIgnoresItsRenewals: the renewals of an egress address's lifetime (every
// third of it) are egressd's own doing and signal no change; the address deleted behind
// egressd's back does.
func TestPrivilegedApplierIgnoresItsRenewals(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	const lifetime = 3 * time.Second
	a := l.applierWith(t, kernel.Options{AddressLifetime: lifetime})
	l.mustApply(t, a, fullState())
	// The events of the Apply's own adding come before it published what it holds.
	time.Sleep(300 * time.Millisecond)
	for len(a.Changed()) > 0 {
		<-a.Changed()
	}
	select {
	case <-a.Changed():
		t.Error("a renewal of the egress address's lifetime signalled a change")
	case <-time.After(lifetime + 500*time.Millisecond):
	}
	key := egressIP.String() + "/32 ext0"
	if _, ok := l.addresses(t)[key]; !ok {
		t.Fatalf("%s expired: it was not renewed within its lifetime of %s (%v)", key, lifetime, l.addresses(t))
	}
	l.node.MustRun(t, "ip", "addr", "del", egressIP.String()+"/32", "dev", "ext0")
	select {
	case <-a.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("the egress address deleted behind egressd's back signalled no change")
	}
}

// addStamped adds ip/32 to ifname with address protocol proto (iproute2 6.1 cannot).
func addStamped(ifname string, ip netip.Addr, proto uint8) error {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return err
	}
	req := nl.NewNetlinkRequest(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	msg := nl.NewIfAddrmsg(unix.AF_INET)
	msg.Prefixlen, msg.Index = 32, uint32(link.Attrs().Index)
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFA_LOCAL, ip.AsSlice()))
	req.AddData(nl.NewRtAttr(unix.IFA_ADDRESS, ip.AsSlice()))
	req.AddData(nl.NewRtAttr(11, []byte{proto})) // IFA_PROTO
	_, err = req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// TestPrivilegedApplierPodsInForce: Apply reports a new pod in force as soon as its interface
// is attached, with the classifier already there, before Apply returns; a pod whose interface
// was attached before is not reported again, and a second new pod is reported alone.
func TestPrivilegedApplierPodsInForce(t *testing.T) {
	privileged.Require(t)
	l := newLab(t)
	type report struct {
		pods     []dataplane.Origin
		attached map[string]bool // the interfaces running the classifier then
	}
	var reports []report
	var a *kernel.Applier
	l.in(t, func() (err error) {
		a, err = kernel.New(kernel.Options{PinRoot: l.root, PodsInForce: func(_ *dataplane.State, pods []dataplane.Origin, _ map[dataplane.Origin]error) {
			r := report{pods: slices.Clone(pods), attached: map[string]bool{}}
			for _, ifname := range []string{"pod0", "pod1", "pod2", "pod3"} {
				progs, _ := tc.Query(ifname) // the callback runs on Apply's thread, in the node's namespace
				r.attached[ifname] = slices.ContainsFunc(progs, func(p tc.Program) bool { return p.Name == tc.ProgramName })
			}
			reports = append(reports, r)
		}}, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
		return err
	})
	t.Cleanup(a.Close)
	state := fullState()
	l.mustApply(t, a, state)
	if len(reports) != 1 || !slices.Equal(reports[0].pods, []dataplane.Origin{podOrigin}) {
		t.Fatalf("first Apply reported %+v, want the pod once", reports)
	}
	if !reports[0].attached["pod0"] {
		t.Errorf("pod reported in force before its interface runs the classifier: %+v", reports[0].attached)
	}
	l.mustApply(t, a, state)
	if len(reports) != 1 {
		t.Errorf("a second Apply of the same pods reported %+v", reports[1:])
	}
	// A second pod behind a new interface.
	pod2 := netns.New(t, "pod2")
	netns.Veth(t, l.node, "pod1", pod2, "eth0")
	ip2 := netip.MustParseAddr("10.244.0.6")
	pod2.Addr(t, "eth0", ip2.String()+"/32")
	l.node.MustRun(t, "ip", "route", "add", ip2.String()+"/32", "dev", "pod1", "scope", "link")
	other := dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "pb"}
	state.Classifier.Pods = append(state.Classifier.Pods, dataplane.Pod{Origin: other, IPs: []netip.Addr{ip2}})
	l.mustApply(t, a, state)
	if len(reports) != 2 || !slices.Equal(reports[1].pods, []dataplane.Origin{other}) {
		t.Fatalf("after a second pod: reports %+v, want one more with pb alone", reports)
	}
	// A pod with addresses behind two new interfaces: in force once both are attached, reported
	// once. A pod with no interface is never reported.
	for i, ifname := range []string{"pod2", "pod3"} {
		ns := netns.New(t, ifname)
		netns.Veth(t, l.node, ifname, ns, "eth0")
		ns.Addr(t, "eth0", fmt.Sprintf("10.244.0.%d/32", 7+i))
		l.node.MustRun(t, "ip", "route", "add", fmt.Sprintf("10.244.0.%d/32", 7+i), "dev", ifname, "scope", "link")
	}
	lost := netip.MustParseAddr("10.244.0.9")
	l.node.MustRun(t, "ip", "route", "add", lost.String()+"/32", "via", extIP.String())
	two, gone := dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "pc"}, dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "pd"}
	state.Classifier.Pods = append(state.Classifier.Pods,
		dataplane.Pod{Origin: two, IPs: []netip.Addr{netip.MustParseAddr("10.244.0.7"), netip.MustParseAddr("10.244.0.8")}},
		dataplane.Pod{Origin: gone, IPs: []netip.Addr{lost}})
	res := l.apply(t, a, state)
	if res.Failed[gone] == nil || len(res.Failed) != 1 {
		t.Errorf("Apply failed %v, want pd alone (its address is routed, not on an interface)", res.Failed)
	}
	if len(reports) != 3 || !slices.Equal(reports[2].pods, []dataplane.Origin{two}) {
		t.Fatalf("after a pod on two interfaces and one on none: reports %+v, want one more with pc alone", reports[2:])
	}
	if !reports[2].attached["pod2"] || !reports[2].attached["pod3"] {
		t.Errorf("pc reported in force before both its interfaces run the classifier: %v", reports[2].attached)
	}
}
