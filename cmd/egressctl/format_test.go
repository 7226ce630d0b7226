package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/egressd/egressd/dataplane/bfd"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/nft"
	"github.com/egressd/egressd/dataplane/routing"
	"github.com/egressd/egressd/nodeagent"
)

var (
	a = netip.MustParseAddr
	p = netip.MustParsePrefix
)

// The routing and egress steps of trace for every way out the kernel can hold.
func TestPrintTraceSteps(t *testing.T) {
	pod, dst := a("10.244.0.5"), a("203.0.113.10")
	local := classifier.Trace{Namespace: "a", Verdict: "allow", Rule: -1, DSCP: -1, Mark: 0x30000}
	group := &routing.ProgrammedRoute{Table: 7103, Dst: p("0.0.0.0/0"), Group: 71000001, Gateways: []netip.Addr{a("192.0.2.2"), a("192.0.2.3")}}
	rule := routing.ProgrammedRule{Priority: 6103, Mark: 0x30000, Mask: 0xff0000, Table: 7103}
	for _, c := range []struct {
		name     string
		t        traced
		want     string // the routing and egress lines
		firewall string // the firewall line, when the case is about it
	}{
		{"ECMP, object unknown", traced{classifier: local, routed: true, rule: rule, route: group},
			"routing:  mark 0x30000: rule 6103 -> table 7103, 0.0.0.0/0: nexthop group 71000001, spread per flow over 192.0.2.2, 192.0.2.3\n" +
				"egress:   source 10.244.0.5 (the pod address: egressd keeps it), next hop 192.0.2.2, 192.0.2.3 (an egress node, which SNATs it to its egress IP, or an external gateway)\n", ""},
		{"egress nodes of an EgressIP", traced{classifier: local, routed: true, rule: rule, route: group, path: &pathOf{"EgressIP", "eip"}},
			"routing:  mark 0x30000 (EgressIP eip): rule 6103 -> table 7103, 0.0.0.0/0: nexthop group 71000001, spread per flow over 192.0.2.2, 192.0.2.3\n" +
				"egress:   source 10.244.0.5 (the pod address: egressd keeps it), next hop 192.0.2.2, 192.0.2.3 (egress node of EgressIP eip, which SNATs it to its egress IP)\n", ""},
		{"gateways, SNATed here first", traced{classifier: local, routed: true, rule: rule, route: group, path: &pathOf{kindExternalRoute, "gws"}, egress: nft.PodEgress{SNATTo: a("192.0.2.100"), Guarded: true}},
			"routing:  mark 0x30000 (AdminPolicyBasedExternalRoute gws): rule 6103 -> table 7103, 0.0.0.0/0: nexthop group 71000001, spread per flow over 192.0.2.2, 192.0.2.3\n" +
				"egress:   source 192.0.2.100 (egress IP, SNATed on this node), next hop 192.0.2.2, 192.0.2.3\n", ""},
		{"an egress IP on a secondary network, out of its interface on link", traced{classifier: local, routed: true, rule: rule,
			route: &routing.ProgrammedRoute{Table: 7103, Dst: p("0.0.0.0/0"), Device: "eth1"}, path: &pathOf{"EgressIP", "eip"}, egress: nft.PodEgress{SNATTo: a("10.10.10.100"), Guarded: true}},
			"routing:  mark 0x30000 (EgressIP eip): rule 6103 -> table 7103, 0.0.0.0/0: dev eth1\n" +
				"egress:   source 10.10.10.100 (egress IP, SNATed on this node), out of eth1 (on link)\n", ""},
		{"no live gateway", traced{classifier: local, routed: true, rule: rule, route: &routing.ProgrammedRoute{Table: 7103, Dst: p("0.0.0.0/0"), Blackhole: true}},
			"routing:  mark 0x30000: rule 6103 -> table 7103, 0.0.0.0/0: blackhole (no live gateway)\n" +
				"egress:   none: dropped by egressd's routing (the path has no live gateway)\n", ""},
		{"a network's table", traced{classifier: classifier.Trace{Namespace: "a", Verdict: "allow", Rule: -1, DSCP: -1}, routed: true,
			rule: routing.ProgrammedRule{Priority: 6100, Src: p("10.244.0.5/32"), Table: 100}},
			"routing:  source 10.244.0.5/32: rule 6100 -> table 100 (not egressd's: the table of the pod's network)\n" +
				"egress:   source 10.244.0.5 (the pod address: egressd keeps it), through table 100\n", ""},
		{"mark without a rule, guarded", traced{classifier: local, egress: nft.PodEgress{Guarded: true}},
			"routing:  mark 0x30000: none of egressd's rules selects it: the node's own routing\n" +
				"egress:   none: dropped by the EgressIP leak guard (a selected pod that is neither steered nor SNATed here)\n", ""},
		{"logged deny", traced{classifier: classifier.Trace{Namespace: "a", Verdict: "deny", Rule: 3, RuleText: "Deny to 0.0.0.0/0", Logged: true, DSCP: -1}},
			"routing:  not routed: dropped by the firewall\negress:   none: dropped by the firewall\n",
			"firewall: deny by rule 3 of a (ACL-logged): Deny to 0.0.0.0/0\n"},
		{"unmarked, untouched", traced{classifier: classifier.Trace{Namespace: "a", Verdict: "allow", Rule: 0, RuleText: "Allow to 203.0.113.0/24", DSCP: -1}},
			"routing:  no mark: the node's own routing\negress:   source as the CNI makes it (egressd does not rewrite it), the node's own routing\n",
			"firewall: allow by rule 0 of a: Allow to 203.0.113.0/24\n"},
	} {
		c.t.src, c.t.dst = pod, dst
		var out bytes.Buffer
		if err := newTraceReport(c.t).writeText(&out); err != nil {
			t.Fatal(err)
		}
		got := out.String()
		if !strings.HasSuffix(got, c.want) || !strings.Contains(got, c.firewall) {
			t.Errorf("%s:\n%s\nwant it to end with:\n%s%s", c.name, got, c.firewall, c.want)
		}
	}
}

func TestPrintRoutes(t *testing.T) {
	programmed := routing.Programmed{
		Rules: []routing.ProgrammedRule{
			{Priority: 6100, Src: p("10.244.0.7/32"), Table: 100},
			{Priority: 6101, Mark: 0x10000, Mask: 0xff0000, Table: 7101},
		},
		Routes: []routing.ProgrammedRoute{
			{Table: 7101, Dst: p("0.0.0.0/0"), Group: 71000002, Gateways: []netip.Addr{a("198.51.100.1"), a("198.51.100.2")}},
			{Table: 7101, Dst: p("::/0"), Gateways: []netip.Addr{a("2001:db8::1")}, Src: a("2001:db8::100")},
		},
		Standby: []netip.Addr{a("198.51.100.3")},
	}
	paths := map[uint32]pathOf{0x10000: {kindExternalRoute, "gws"}}
	sessions := []bfd.SessionInfo{
		{Key: bfd.Key{Peer: a("198.51.100.1"), Interface: "eth1"}, State: bfd.Up, DetectionTime: 900 * time.Millisecond,
			Counters: bfd.Counters{PacketsSent: 40, PacketsReceived: 38, Transitions: 1}},
		{Key: bfd.Key{Peer: a("198.51.100.3")}, State: bfd.Down, Counters: bfd.Counters{PacketsSent: 12, Transitions: 2, Detections: 1}},
	}
	r := routesReport{routingReport: newRoutingReport(programmed, paths, sessions), BFDSessions: newBFDSessions(sessions)}
	var out bytes.Buffer
	if err := r.writeText(&out); err != nil {
		t.Fatal(err)
	}
	want := `RULE  FAMILY  FWMARK            FROM           TABLE  PATH OF
6100  ipv4    -                 10.244.0.7/32  100    -
6101  ipv4    0x10000/0xff0000  all            7101   AdminPolicyBasedExternalRoute gws

TABLE  DESTINATION  ROUTE
7101   0.0.0.0/0    nexthop group 71000002, per flow over 198.51.100.1 (BFD Up), 198.51.100.2
7101   ::/0         via 2001:db8::1, source 2001:db8::100

gateways kept out of their groups (BFD session not Up): 198.51.100.3 (BFD Down)

BFD SESSION        STATE  DETECTION TIME  SENT  RECEIVED  TRANSITIONS  DETECTIONS
198.51.100.1%eth1  Up     900ms           40    38        1            0
198.51.100.3       Down   0s              12    0         2            1
`
	if got := out.String(); got != want {
		t.Errorf("printRoutes:\n%s\nwant:\n%s", got, want)
	}

	out.Reset()
	r = routesReport{routingReport: newRoutingReport(programmed, nil, nil), MetricsError: "refused"}
	if err := r.writeText(&out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasSuffix(got, "198.51.100.3\n\nBFD sessions: the agent's metrics refused; the groups above hold the live gateways\n") {
		t.Errorf("printRoutes without metrics:\n%s", got)
	}
}

// egressctl reads the steering paths under the name and labels the agent exports them with.
func TestSteeredPathsFromTheAgentsMetrics(t *testing.T) {
	m := nodeagent.NewMetrics()
	m.SteeredPaths.WithLabelValues("EgressIP", "eip", "0x20000").Set(3)
	srv := httptest.NewServer(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	families, err := scrape(t.Context(), strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if got := steeredPaths(families); len(got) != 1 || got[0x20000] != (pathOf{"EgressIP", "eip"}) {
		t.Errorf("steered paths %v, want mark 0x20000 of EgressIP eip", got)
	}
	if _, err := scrape(t.Context(), "0"); !errors.Is(err, errNoMetrics) {
		t.Errorf("scrape of address 0: %v, want errNoMetrics", err)
	}
}

func TestRunUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"--output", "yaml", "version"}, 2, `egressctl version: --output "yaml" is not text or json`},
		{[]string{"--bogus", "firewall"}, 2, "unknown flag: --bogus"},
		{[]string{"firewall", "--bpf-pin-root"}, 2, "flag needs an argument: --bpf-pin-root"},
		{[]string{"routes", "extra"}, 2, `egressctl routes: unexpected arguments ["extra"]`},
		{[]string{"trace", "10.244.0.5"}, 1, "usage: egressctl trace SRC DST [tcp|udp|sctp/PORT]"},
		{[]string{"trace", "10.244.0.5", "2001:db8::1"}, 1, "of different families"},
		{[]string{"trace", "10.244.0.5", "192.0.2.1", "icmp/1"}, 1, `"icmp/1" is not tcp|udp|sctp/PORT`},
		{[]string{"trace", "10.244.0.5", "192.0.2.1", "tcp/0"}, 1, `"tcp/0" is not tcp|udp|sctp/PORT`},
		{[]string{"trace", "10.244.0.5", "192.0.2.1", "udp"}, 1, `"udp" is not tcp|udp|sctp/PORT`},
	} {
		var out, errs bytes.Buffer
		if code := run(c.args, &out, &errs); code != c.code || !strings.Contains(errs.String(), c.err) {
			t.Errorf("egressctl %s: exit %d, %q; want exit %d, %q", strings.Join(c.args, " "), code, errs.String(), c.code, c.err)
		}
	}
	if proto, port, err := parsePort("SCTP/9"); proto != 132 || port != 9 || err != nil {
		t.Errorf("parsePort(SCTP/9) = %d, %d, %v", proto, port, err)
	}
}

// Flags are accepted before and after the command, in both spellings of --output.
func TestRunFlagsBeforeAndAfterTheCommand(t *testing.T) {
	for _, args := range [][]string{
		{"version", "-o", "json"},
		{"-o", "json", "version"},
		{"--output=json", "version"},
		{"--metrics-address", "0", "version", "--output", "json", "--bpf-pin-root", "/nowhere"},
	} {
		var out, errs bytes.Buffer
		if code := run(args, &out, &errs); code != 0 {
			t.Errorf("egressctl %s: exit %d: %s", strings.Join(args, " "), code, errs.String())
			continue
		}
		var v versionReport
		if err := json.Unmarshal(out.Bytes(), &v); err != nil || v.Version == "" {
			t.Errorf("egressctl %s: %q is no version report (%v)", strings.Join(args, " "), out.String(), err)
		}
	}
}

// egressctl status reads the agent's version and its objects under the names and
// labels the agent exports them with.
func TestStatusFromTheAgentsMetrics(t *testing.T) {
	m := nodeagent.NewMetrics()
	m.Objects.WithLabelValues("EgressFirewall", "applied").Set(2)
	m.Objects.WithLabelValues("EgressFirewall", "failed").Set(1)
	m.Objects.WithLabelValues("EgressQoS", "applied").Set(1)
	m.ObjectFailures.WithLabelValues("EgressFirewall", "b/default", "invalid").Set(1)
	m.SteeredPaths.WithLabelValues("EgressIP", "eip", "0x10000").Set(2)
	m.SyncErrors.WithLabelValues("egressfirewall").Add(3)
	m.SyncErrors.WithLabelValues("apply").Add(1)
	srv := httptest.NewServer(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	families, err := scrape(t.Context(), strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	r := statusReport{EgressctlVersion: "v1", FirewallRules: 3, QoSRules: 1,
		EgressIPs: []hostedAddress{{a("192.0.2.100"), "eth0"}}}
	r.fromMetrics(families)
	if r.AgentVersion == "" {
		t.Errorf("no agent version in %s", metricBuildInfo)
	}
	r.AgentVersion = "v2"
	var out bytes.Buffer
	if err := r.writeText(&out); err != nil {
		t.Fatal(err)
	}
	want := `egressctl:          v1
agent:              v2
sync errors:        apply 1, egressfirewall 3 since the agent started
classifier:         3 EgressFirewall rules, 1 EgressQoS rules
egress IPs hosted:  192.0.2.100 on eth0

KIND            APPLIED  FAILED
EgressFirewall  2        1
EgressQoS       1        0

FAILING         OBJECT     REASON (the error: the object's status, the agent's log)
EgressFirewall  b/default  invalid

STEERED PATH  MARK     LOCAL POD ADDRESSES
EgressIP eip  0x10000  2

BFD sessions: none
`
	if got := out.String(); got != want {
		t.Errorf("status:\n%s\nwant:\n%s", got, want)
	}
}

// egressctl sends the pod's ServiceAccount token with a scrape (the agent guards /metrics),
// and says how to get access when the agent refuses it.
func TestScrapeSendsTheToken(t *testing.T) {
	dir := t.TempDir()
	was := tokenFile
	tokenFile = filepath.Join(dir, "token")
	defer func() { tokenFile = was }()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(w, "egressd_build_info{version=\"v1\"} 1")
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	if _, err := scrape(t.Context(), addr); err == nil || !strings.Contains(err.Error(), "run egressctl in the agent's pod") {
		t.Errorf("without a token: %v", err)
	}
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if families, err := scrape(t.Context(), addr); err != nil || families["egressd_build_info"] == nil {
		t.Errorf("with the token: %v, %v", families, err)
	}
}
