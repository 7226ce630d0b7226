package classifier

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/egressd/egressd/bpf"
	"github.com/egressd/egressd/dataplane"
)

var (
	allowCluster = dataplane.FirewallRule{Index: 0, Prefixes: pfx("10.0.0.0/8"), Text: "Allow to 10.0.0.0/8"}
	denyHTTPS    = dataplane.FirewallRule{Index: 1, Deny: true, Prefixes: pfx("0.0.0.0/0"), Ports: []dataplane.Port{{Protocol: 6, Port: 443}}}
	denyAll      = dataplane.FirewallRule{Index: 2, Deny: true, Prefixes: pfx("0.0.0.0/0")}
)

// TestFirewallSetEntries: a namespace's rules become the program's entries: each prefix's first
// rule without ports with its verdict (allow, deny), flagged when a rule with ports comes
// first, the ports table's entries in network byte order, and each rule's text by index.
// Rules out of order are refused: the first match would be wrong.
func TestFirewallSetEntries(t *testing.T) {
	set, err := firewallSet(nsID(9), []dataplane.FirewallRule{allowCluster, denyHTTPS, denyAll})
	if err != nil {
		t.Fatal(err)
	}
	want := map[bpf.FromPodLpmKey]bpf.FromPodFwEntry{
		lpmKey(nsID(9), netip.MustParsePrefix("10.0.0.0/8")): {Rule: 0, Verdict: verdictAllow},
		lpmKey(nsID(9), netip.MustParsePrefix("0.0.0.0/0")):  {Rule: 2, Verdict: verdictDeny, Ports: 1},
	}
	if len(set.fw) != len(want) {
		t.Errorf("entries %v, want %v", set.fw, want)
	}
	for k, v := range want {
		if set.fw[k] != v {
			t.Errorf("entry of /%d: %+v, want %+v", k.Prefixlen-32, set.fw[k], v)
		}
	}
	pk := portKey(nsID(9), PortPrefix{Port: denyHTTPS.Ports[0], Prefix: netip.MustParsePrefix("0.0.0.0/0")})
	if len(set.ports) != 1 || set.ports[pk] != (bpf.FromPodFwEntry{Rule: 1, Verdict: verdictDeny}) {
		t.Errorf("port entries %v, want the HTTPS deny at 0.0.0.0/0", set.ports)
	}
	if got := set.texts[statKey(nsID(9), 0)]; !strings.HasPrefix(string(got.S[:]), "Allow to 10.0.0.0/8\x00") || len(set.texts) != 3 {
		t.Errorf("texts %v", set.texts)
	}
	for _, rules := range [][]dataplane.FirewallRule{{denyHTTPS, allowCluster}, {denyHTTPS, denyHTTPS}, {{Index: 70000}}, {{Index: -1}}} {
		if _, err := firewallSet(nsID(9), rules); err == nil {
			t.Errorf("indices %d.. accepted", rules[0].Index)
		}
	}
}

// TestFirewallsOfFailsClosed: a namespace whose firewall could not be compiled, or whose rules
// cannot be written, keeps the entries it has (what is enforced stays) and fails; one whose
// rules did not change keeps its written set (nothing to write); a changed one gets a new set.
// Each namespace's ACL logging is taken from its annotation.
func TestFirewallsOfFailsClosed(t *testing.T) {
	ns := func(name string) dataplane.Origin {
		return dataplane.Origin{Kind: "EgressFirewall", Namespace: name, Name: "default"}
	}
	a := newIDs()
	ids := map[string]nsID{}
	for _, n := range []string{"broken", "bad", "same", "changed"} {
		ids[n] = a.namespace(n)
	}
	written := map[string]*fwSet{}
	c := &Classifier{fwSets: map[nsID]*fwSet{}}
	for n, rules := range map[string][]dataplane.FirewallRule{"broken": {denyAll}, "bad": {denyAll}, "same": {denyAll}, "changed": {denyAll}} {
		set, _ := firewallSet(ids[n], rules)
		set.fingerprint = fingerprint(rules)
		written[n], c.fwSets[ids[n]] = set, set
	}
	compileErr := errors.New("dnsName: no such zone")
	failed := map[dataplane.Origin]error{}
	fws := c.firewallsOf([]dataplane.Firewall{
		{Origin: ns("changed"), Rules: []dataplane.FirewallRule{allowCluster, denyAll}, Log: dataplane.ACLLog{Deny: "alert"}},
		{Origin: ns("broken"), Err: compileErr},
		{Origin: ns("bad"), Rules: []dataplane.FirewallRule{denyAll, allowCluster}},
		{Origin: ns("same"), Rules: []dataplane.FirewallRule{denyAll}},
	}, a, failed)
	for _, n := range []string{"broken", "bad", "same"} {
		if fws.sets[ids[n]] != written[n] {
			t.Errorf("%s: a new set, want the written one kept", n)
		}
	}
	if s := fws.sets[ids["changed"]]; s == written["changed"] || len(s.fw) != 2 {
		t.Errorf("changed: the written set kept, want the new rules' entries")
	}
	if !errors.Is(failed[ns("broken")], compileErr) || failed[ns("bad")] == nil || len(failed) != 2 {
		t.Errorf("failures %v, want broken's and bad's", failed)
	}
	if fws.log["changed"] != logDeny || fws.log["same"] != 0 || fws.ids["changed"] != ids["changed"] {
		t.Errorf("log flags %v, ids %v", fws.log, fws.ids)
	}
}

// TestFirewallsForReusesTheWrittenList: a sync that brings the same list of firewalls (same
// version) while the entries written from it are still held reuses the computation, its ids
// and its failures; another version, or entries that were not all written, compute again.
func TestFirewallsForReusesTheWrittenList(t *testing.T) {
	broken := dataplane.Origin{Kind: "EgressFirewall", Namespace: "b", Name: "default"}
	s := &dataplane.ClassifierState{FirewallsVersion: 4, Firewalls: []dataplane.Firewall{
		{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: "a", Name: "default"}, Rules: []dataplane.FirewallRule{denyAll}},
		{Origin: broken, Err: errors.New("bad CIDR")},
	}}
	c := &Classifier{fwSets: map[nsID]*fwSet{}}
	if _, _, reused := c.firewallsFor(s, newIDs(), map[dataplane.Origin]error{}); reused {
		t.Fatal("reused before anything was computed")
	}
	fws, _, reused := c.firewallsFor(s, newIDs(), map[dataplane.Origin]error{})
	if reused {
		t.Error("reused while its entries are not written")
	}
	for id, set := range fws.sets { // as syncFirewalls leaves them
		if set != nil {
			c.fwSets[id] = set
		}
	}
	a, failed := newIDs(), map[dataplane.Origin]error{}
	again, _, reused := c.firewallsFor(s, a, failed)
	if !reused || failed[broken] == nil || a.namespaces[again.ids["a"]] != "a" {
		t.Errorf("same version: reused %v, failures %v, ids %v; want reused with b's failure and a's id", reused, failed, a.namespaces)
	}
	s.FirewallsVersion = 5
	if _, _, reused := c.firewallsFor(s, newIDs(), map[dataplane.Origin]error{}); reused {
		t.Error("another version reused")
	}
}
