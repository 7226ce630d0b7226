package main

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/egressd/egressd/dataplane/bfd"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/nft"
	"github.com/egressd/egressd/dataplane/routing"
	"github.com/egressd/egressd/internal/golden"
)

// The JSON of every command is a contract with scripts: its field names change only on
// purpose (go test -update, and say so in the commit).
func TestJSONShapes(t *testing.T) {
	bytes0, bytes1 := uint64(0), uint64(1500)
	programmed := routing.Programmed{
		Rules: []routing.ProgrammedRule{{Priority: 6100, Src: p("10.244.0.7/32"), Table: 100},
			{Priority: 6101, Mark: 0x10000, Mask: 0xff0000, Table: 7101}},
		Routes:  []routing.ProgrammedRoute{{Table: 7101, Dst: p("0.0.0.0/0"), Group: 71000002, Gateways: []netip.Addr{a("198.51.100.1")}, Src: a("192.0.2.100")}},
		Standby: []netip.Addr{a("198.51.100.3")},
	}
	sessions := []bfd.SessionInfo{{Key: bfd.Key{Peer: a("198.51.100.1"), Interface: "eth1"}, State: bfd.Up, DetectionTime: 900 * time.Millisecond,
		Counters: bfd.Counters{PacketsSent: 40, PacketsReceived: 38, Transitions: 1}}}
	paths := map[uint32]pathOf{0x10000: {"EgressIP", "eip"}}
	steering := newRoutingReport(programmed, paths, sessions)
	trace := newTraceReport(traced{src: a("10.244.0.5"), dst: a("203.0.113.10"),
		classifier: classifier.Trace{Namespace: "a", Verdict: "allow", Rule: 0, RuleText: "Allow to 203.0.113.0/24", DSCP: 0, QoSRule: 1, QoSText: "DSCP 0 to 0.0.0.0/0", Mark: 0x10000},
		egress:     nft.PodEgress{SNATTo: a("192.0.2.100")}, routed: true, rule: programmed.Rules[1], route: &programmed.Routes[0], path: &pathOf{"EgressIP", "eip"}})
	trace.Protocol, trace.Port = "tcp", 443
	hosted := []hostedAddress{{a("192.0.2.100"), "eth0"}}
	var out bytes.Buffer
	for _, r := range []report{
		versionReport{Version: "v1"},
		rulesReport{Kind: "EgressFirewall", Rules: []rulesRow{{Namespace: "a", Rule: 0, Packets: 3, Bytes: &bytes1, Spec: "Deny to 0.0.0.0/0"},
			{Namespace: "b", Rule: 1, Bytes: &bytes0, Spec: "Allow to 192.0.2.0/24"}}},
		rulesReport{Kind: "EgressQoS", Rules: []rulesRow{{Namespace: "a", Rule: 0, Packets: 3, Spec: "DSCP 46 to 0.0.0.0/0"}}},
		routesReport{routingReport: steering, BFDSessions: newBFDSessions(sessions)},
		routesReport{routingReport: newRoutingReport(programmed, nil, nil), BFDSessions: []bfdSession{}, MetricsError: "not read (--metrics-address 0)"},
		egressIPReport{Hosted: hosted, SNAT: []snatEntry{{a("10.244.0.5"), a("192.0.2.100")}}, Steering: steering,
			Tunnel: &tunnelReport{Device: "egressd-vxlan", VNI: 229, Port: 4799, Local: a("172.18.0.10"), MAC: "02:e5:ac:12:00:0a",
				Peers: []tunnelPeer{{Underlay: a("172.18.0.11"), MAC: "02:e5:ac:12:00:0b", Nexthops: []netip.Addr{a("172.18.0.11"), a("fe80::e5:acff:fe12:b")}}}}},
		trace,
		statusReport{EgressctlVersion: "v1", AgentVersion: "v1",
			SyncErrors: []featureErrors{{"apply", 1}}, Objects: []objectCount{{"EgressFirewall", 2, 1}},
			Failing:       []failingObject{{"EgressFirewall", "b/default", "invalid"}},
			FirewallRules: 3, QoSRules: 1, SteeredPaths: []steeredPath{{pathOf{"EgressIP", "eip"}, "0x10000", 2}},
			BFDSessions: newBFDSessions(sessions), EgressIPs: hosted, Unread: []string{"classifier: no pins"}},
		cleanupReport{Removed: []string{"removed nftables table inet egressd"}},
	} {
		if err := write(&out, r, "json"); err != nil {
			t.Fatal(err)
		}
	}
	golden.Assert(t, "testdata/json.golden", out.String())
}
